"""Step level (issues 17 and 24): distsim's step-time model against measured engine steps.

    python -m distsim.fidelity.steps FOLDER [overrides...] [--fit] [--nnls] [--lomo] [--out DIR]

:mod:`.data` reads a folder of step tables, :mod:`.compare` prices their steps with the latency model,
:mod:`.fit` fits coefficients by least squares on log ratios, :mod:`.nnls` fits the per-operator model's
GPU terms by bounded linear least squares, :mod:`.cli` is the command (this package's ``__main__``).
"""
