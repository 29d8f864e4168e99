"""Moved to :mod:`distsim.fidelity.metrics` (one definition of the compared figures); kept for the
modules that still import it from here."""

from distsim.fidelity.metrics import STAGE_METRICS, WHOLE_RUN, group_metrics, stage_index, stage_metrics

__all__ = ["STAGE_METRICS", "WHOLE_RUN", "group_metrics", "stage_index", "stage_metrics"]
