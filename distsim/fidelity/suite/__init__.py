"""Whole runs (issue 17, item 6): replay a folder of measured vLLM runs and tabulate the errors.

    python -m distsim.fidelity.suite FOLDER [overrides...] --out DIR [--runs IDS]

:mod:`.data` reads the folder (experiments, workload profiles, traces, measurements), :mod:`.metrics`
computes the per-stage figures by the measurements' definitions, :mod:`.replay` replays the runs and is the
command (this package's ``__main__``).
"""
