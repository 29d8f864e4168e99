"""Step-time models behind one small interface, chosen by ``cluster.latency.kind``."""

from distsim.instance.latency.base import LATENCY_MODELS, LatencyModel, StepShape, build_latency_model

__all__ = ["LATENCY_MODELS", "LatencyModel", "StepShape", "build_latency_model"]
