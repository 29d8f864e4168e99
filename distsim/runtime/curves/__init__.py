"""Service curves: how long a batching runtime's batch takes (one module per kind, registered in registry.py)."""
