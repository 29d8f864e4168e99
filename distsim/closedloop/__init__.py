"""The closed-loop workloads' features (distsim.feature): what the clients and the closed-loop sessions of
distsim.workload (driven sources) report after a run: their request columns and summary sections."""
