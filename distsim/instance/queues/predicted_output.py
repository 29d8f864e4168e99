"""Predicted output first: shortest predicted job first, as a length predictor in front of vLLM's priority
scheduler does (each request's priority its predicted output length). It cuts queueing behind long
generations; the prediction's error (cluster.engine.output_prediction_sigma) is what it costs in practice."""

from __future__ import annotations

from distsim.instance.queues.keyed import KeyedQueue
from distsim.instance.queues.output_prediction import ORACLE, OutputPrediction
from distsim.instance.queues.registry import QUEUES
from distsim.request import Request


@QUEUES.register("predicted_output")
class PredictedOutputQueue(KeyedQueue):
    """Fewer predicted output tokens first, FCFS among equal predictions; with aging, a request counts
    ``aging`` fewer predicted output tokens per second waited. Without a predictor, the true lengths (an oracle)."""

    __slots__ = ("prediction",)

    def __init__(self, aging_per_s: float = 0.0, prediction: OutputPrediction | None = None):
        super().__init__(aging_per_s)
        self.prediction = prediction or ORACLE

    def key(self, req: Request) -> tuple:
        predicted = self.prediction.predict(req)
        if self.aging_per_us:
            return (predicted + req.arrival_us * self.aging_per_us, req.arrival_us)
        return (predicted, req.arrival_us)
