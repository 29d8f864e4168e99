"""Scorers for the weighted router: each gives every candidate instance a score in [0, 1]."""

from distsim.policies.scorers.base import SCORERS, Scorer

__all__ = ["SCORERS", "Scorer"]
