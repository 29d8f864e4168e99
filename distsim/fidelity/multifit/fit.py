"""Moved: :func:`distsim.fidelity.suite.replay.fit_runs`; kept for the modules that still import it from here."""

from distsim.fidelity.suite.replay import fit_runs

__all__ = ["fit_runs"]
