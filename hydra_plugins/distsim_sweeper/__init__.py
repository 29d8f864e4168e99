"""distsim's Hydra sweeper (``hydra/sweeper=distsim``): every job of a multirun on a pool of Ray actors."""
