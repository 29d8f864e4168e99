"""Folders of measured runs with per-stage aggregates, laid out like ``../shared/data/h100_vllm_runs``.

:mod:`.data` reads the folder (experiments, workload profiles, traces, measurements); :mod:`.replay`
replays every run of it and tabulates the errors (``python -m distsim.calibrate validate FOLDER``).
"""
