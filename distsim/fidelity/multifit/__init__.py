"""The multi-run fit (issue 17): one coefficient set fitted across many measured runs at once.

:mod:`.fit` runs the search and scores the runs, :mod:`.space` parses the search space, :mod:`.pool`
replays runs in worker processes, :mod:`.lomo` leaves each model out in turn, :mod:`.report` writes the
JSON and Markdown record, and :mod:`.cli` is the command line (``python -m distsim.calibrate --suite``).
"""
