"""The cluster: pools of instances behind admission and routing."""
