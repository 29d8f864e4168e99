"""Step-time models behind one small interface, chosen by ``cluster.latency.kind``."""

from distsim.instance.latency.base import LatencyModel, StepShape
from distsim.instance.latency.build import build_latency_model
from distsim.instance.latency.registry import LATENCY_MODELS

__all__ = ["LATENCY_MODELS", "LatencyModel", "StepShape", "build_latency_model"]
