"""Step level: distsim's step-time model against measured engine steps (``python -m distsim.calibrate steps``).

:mod:`.data` reads a folder of step tables, :mod:`.compare` prices their steps with the latency model,
:mod:`.nnls` fits the per-operator model's GPU terms by bounded linear least squares, :mod:`.cli` is the
``steps`` stage of the calibration command.
"""
