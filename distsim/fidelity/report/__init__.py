"""The generated tables of docs/fidelity.md (``python scripts/fidelity_h100.py``): :mod:`.model` the
step model on the step tables and the runs, with its serving layer."""
