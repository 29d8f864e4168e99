"""The distributed experiment runner: sweeps of whole simulations on a pool of Ray actors.

plan (overrides -> jobs) -> compose (once per configuration) -> sweep (the driver: resume, run, write)
-> session/pool/actor/job (Ray start-up, the actors, one simulation per call) -> rows, store (results
table, atomic files) -> ranking, table (statistics, terminal output). The Hydra sweeper plugin
(hydra_plugins/distsim_sweeper) and :func:`distsim.runner.api.sweep` are the two ways in.
"""
