"""The profiler backends (each module registers one in distsim.profile.backend.BACKENDS)."""
