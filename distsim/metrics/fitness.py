"""Fitness: one number per run, higher is better.

``goodput`` (the default): requests per second that meet both their TTFT and TPOT SLOs, divided by
the number of GPUs (``per: gpu``), by the dollars per hour of the cluster (``per: dollar``), or not at
all (``per: none``). Goodput is the figure serving papers (DistServe, Sarathi-Serve) and production
routers optimise: it rewards throughput only while latency objectives hold, so a policy cannot win by
overloading instances, and normalising by GPUs or dollars lets clusters of different sizes compare.

``capacity`` (DistServe's goodput): the highest arrival rate at which at least ``share`` of the requests
meet both SLOs, found by bisection on the rate over the same requests scaled in time
(distsim.metrics.capacity), divided as goodput is. It tells apart policies that all meet the SLOs at the
configured load.

``weighted`` (BLIS style): a weighted mean of metrics each mapped to [0, 1]: a higher-is-better
metric x becomes x / (x + ref), a lower-is-better one ref / (ref + x), a share stays as it is; ``ref``
is the value that scores 0.5 (the scale of "good"). Useful when the objective mixes latency and cost
and no single SLO captures it. Unknown metric names list the known ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distsim.errors import ConfigError
from distsim.metrics.summary import rnd
from distsim.registry import Registry

if TYPE_CHECKING:
    from distsim.metrics.settings import FitnessSettings

# forms live in this module; naming it keeps discovery uniform across families
FITNESS: Registry[Callable[[dict[str, Any], FitnessSettings], float | None]] = Registry("fitness form", "fitness.kind", __name__)
PER = ("gpu", "dollar", "none")


@FITNESS.register("goodput")
def goodput_fitness(summary: dict[str, Any], cfg: FitnessSettings) -> float:
    return _divided(summary, summary["goodput"]["requests_per_s"] or 0.0, cfg.per)


@FITNESS.register("capacity")
def capacity_fitness(summary: dict[str, Any], cfg: FitnessSettings) -> float | None:
    """Null when no capacity was measured (summary.json's capacity.not_measured says why): never 0.0."""
    rps = summary["capacity"]["requests_per_s"]
    return None if rps is None else _divided(summary, rps, cfg.per)


def _divided(summary: dict[str, Any], rps: float, per: str) -> float:
    """``rps`` per GPU, per dollar per hour of the fleet, or as it is (``per`` none)."""
    derived = summary["_derived"]
    if per == "gpu":
        return rps / derived["gpus"] if derived["gpus"] else 0.0
    if per == "dollar":
        dollars_per_hour = derived["cost_usd"] / (derived["span_s"] / 3600.0) if derived["span_s"] else 0.0
        return rps / dollars_per_hour if dollars_per_hour else 0.0
    return rps  # per == "none"


def _per_gpu(summary: dict[str, Any], value: float | None) -> float:
    gpus = summary["_derived"]["gpus"]
    return (value or 0.0) / gpus if gpus else 0.0


# name -> (how to read it from the summary, direction, default ref)
WEIGHTED_METRICS: dict[str, tuple[Callable[[dict], float | None], str, float]] = {
    "slo_attainment": (lambda s: s["goodput"]["slo_attainment"], "share", 1.0),
    "goodput_per_gpu": (lambda s: _per_gpu(s, s["goodput"]["requests_per_s"]), "higher", 1.0),
    "throughput_per_gpu": (lambda s: _per_gpu(s, s["throughput"]["output_tokens_per_s"]), "higher", 1000.0),
    "ttft_mean_ms": (lambda s: s["ttft_ms"]["mean"], "lower", 500.0),
    "ttft_p99_ms": (lambda s: s["ttft_ms"]["p99"], "lower", 1000.0),
    "tpot_p99_ms": (lambda s: s["tpot_ms"]["p99"], "lower", 100.0),
    "e2e_p99_ms": (lambda s: s["e2e_ms"]["p99"], "lower", 10000.0),
    "cost_usd_per_1k_tokens": (lambda s: s["cost_usd_per_1k_tokens"], "lower", 0.001),
}
DEFAULT_WEIGHTS = {"slo_attainment": 1.0, "ttft_p99_ms": 1.0, "tpot_p99_ms": 1.0, "throughput_per_gpu": 1.0}


def check_fitness(cfg: FitnessSettings) -> None:
    """Raise a ConfigError for settings no fitness form accepts (run before simulating)."""
    if cfg.kind in ("goodput", "capacity") and cfg.per not in PER:
        raise ConfigError("fitness.per", f"must be {', '.join(PER[:-1])} or {PER[-1]} (got {cfg.per!r})")
    if cfg.kind == "capacity":
        check_capacity(cfg.share, cfg.tolerance, cfg.max_steps)
    if cfg.kind != "weighted":
        return
    weights = dict(cfg.weights or DEFAULT_WEIGHTS)
    for section, names in (("weights", weights), ("refs", cfg.refs or {})):
        for name in names:
            if name not in WEIGHTED_METRICS:
                raise ConfigError(f"fitness.{section}.{name}", f"unknown metric; known: {', '.join(sorted(WEIGHTED_METRICS))}")
    if any(w is None or w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ConfigError("fitness.weights", "weights must be >= 0 and not all zero")
    for name, ref in (cfg.refs or {}).items():
        if ref is None or not ref > 0:
            raise ConfigError(f"fitness.refs.{name}", f"must be > 0 (got {ref})")


def check_capacity(share: float, tolerance: float, max_steps: int) -> None:
    """Raise a ConfigError for a share outside (0, 1], a tolerance <= 0 or fewer than 1 step."""
    if not (isinstance(share, (int, float)) and 0 < share <= 1):
        raise ConfigError("fitness.share", f"must be in (0, 1] (got {share!r})")
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise ConfigError("fitness.tolerance", f"must be a finite number > 0 (got {tolerance!r})")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError("fitness.max_steps", f"must be an integer >= 1 (got {max_steps!r})")


@FITNESS.register("weighted")
def weighted_fitness(summary: dict[str, Any], cfg: FitnessSettings) -> float:
    weights = dict(cfg.weights or DEFAULT_WEIGHTS)
    refs = dict(cfg.refs or {})
    total = 0.0
    for name, w in weights.items():
        read, direction, ref = WEIGHTED_METRICS[name]
        ref = float(refs.get(name, ref))
        x = read(summary)
        if x is None:  # nothing completed: the worst score
            score = 0.0
        elif direction == "share":
            score = float(x)
        elif direction == "higher":
            score = x / (x + ref)
        else:
            score = ref / (ref + x)
        total += w * score
    return total / sum(weights.values())


_PER_LABEL = {"gpu": ("per GPU", "req/s"), "dollar": ("per dollar per hour", "req/s per $/h"), "none": ("", "req/s")}


def fitness_label(cfg: FitnessSettings) -> str:
    """What the fitness figure is and its unit, as the printed summary names it: "goodput per GPU, req/s"."""
    if cfg.kind in ("goodput", "capacity"):
        per, unit = _PER_LABEL.get(cfg.per, (f"per {cfg.per}", "req/s"))
        return f"{cfg.kind} {per}".strip() + f", {unit}"
    if cfg.kind == "weighted":
        weighed = [name for name, w in dict(cfg.weights or DEFAULT_WEIGHTS).items() if w]
        return "weighted score of " + ", ".join(weighed) + ", 0 to 1"
    return cfg.kind


def compute_fitness(summary: dict[str, Any], cfg: FitnessSettings) -> float | None:
    return rnd(FITNESS.get(cfg.kind)(summary, cfg), 6)
