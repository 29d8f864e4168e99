"""Re-exports for modules not yet moved to :mod:`distsim.fidelity.pool` and :mod:`distsim.fidelity.suite.replay`."""
