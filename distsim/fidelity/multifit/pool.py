"""Moved to :mod:`distsim.fidelity.pool`; kept for the modules that still import it from here."""

from distsim.fidelity.pool import Replay, ReplayPool, replay_run

__all__ = ["Replay", "ReplayPool", "replay_run"]
