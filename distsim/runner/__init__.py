"""The distributed experiment runner: sweeps of whole simulations on a pool of Ray actors.

plan (expand overrides into jobs) -> sweep (driver: resume, compose once per configuration, run, write)
-> pool/actor/job (Ray workers) -> ranking (statistics) -> table (terminal output). The Hydra sweeper
plugin (hydra_plugins/distsim_sweeper) and :func:`distsim.runner.api.sweep` are the two ways in.
"""
