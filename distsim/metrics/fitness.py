"""Fitness: one number per run, higher is better.

``goodput`` (the default): requests per second that meet both their TTFT and TPOT SLOs, divided by
the number of GPUs (``per: gpu``), by the dollars per hour of the cluster (``per: dollar``), or not at
all (``per: none``). Goodput is the figure serving papers (DistServe, Sarathi-Serve) and production
routers optimise: it rewards throughput only while latency objectives hold, so a policy cannot win by
overloading instances, and normalising by GPUs or dollars lets clusters of different sizes compare.
"""

from __future__ import annotations

from typing import Any

from distsim.errors import ConfigError
from distsim.metrics.summary import rnd
from distsim.registry import Registry

FITNESS: Registry = Registry("fitness form", "fitness.kind")


@FITNESS.register("goodput")
def goodput_fitness(summary: dict[str, Any], cfg: Any) -> float:
    rps = summary["goodput"]["requests_per_s"] or 0.0
    derived = summary["_derived"]
    per = cfg.get("per", "gpu")
    if per == "gpu":
        return rps / derived["gpus"] if derived["gpus"] else 0.0
    if per == "dollar":
        dollars_per_hour = derived["cost_usd"] / (derived["span_s"] / 3600.0) if derived["span_s"] else 0.0
        return rps / dollars_per_hour if dollars_per_hour else 0.0
    if per == "none":
        return rps
    raise ConfigError("fitness.per", f"must be gpu, dollar or none (got {per!r})")


def compute_fitness(summary: dict[str, Any], cfg: Any) -> float | None:
    return rnd(FITNESS.get(cfg.kind)(summary, cfg), 6)
