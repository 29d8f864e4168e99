"""The discrete-event kernel: the integer-microsecond clock and event heap (loop.py) and the seeded random
streams every subsystem draws from by name (rng.py). Not the vLLM engine: that is distsim/instance."""
