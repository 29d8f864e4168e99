"""Autoscaler kinds, one module each (see distsim/autoscale/registry.py)."""
