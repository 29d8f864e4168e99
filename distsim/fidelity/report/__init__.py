"""The generated tables of docs/fidelity.md (``python scripts/fidelity_h100.py``): :mod:`.roofline3` the
per-operator step model on the step tables and the runs, :mod:`.joint` its joint refit."""
