"""Calibrating drawn scenarios (distsim.search.scenarios): a draw where capacity cannot tell policies apart
is resized or redrawn, and a kept draw is put at its knee.

Why: capacity from a finite run is the rate a burst of that many requests tolerates. A draw whose burst is
short against its fleet (a large engine admits the whole burst at once) meets the share at the fleet's
roofline for every policy (``at_roofline``), and a draw whose SLOs no rate meets scores 0 for every policy:
either way the search learns nothing from it, and a judge learns nothing either.

The rule, per draw, on seed ``SEED`` with the built-ins ``POLICIES``:

1. measure each built-in's capacity at ``START_REQUESTS`` requests;
2. while any meets the share at the roofline, double the requests, up to ``MAX_REQUESTS``;
3. if one still does, or none meets the share at any rate, drop the draw and draw the next from the same
   seeded stream (at most ``MAX_TRIES`` draws per family);
4. keep it at the best built-in's capacity (the knee: its load factor scales the workload's arrival rates)
   and at ``SPAN_S`` seconds of arrivals there, at least the requests step 2 reached and at most
   ``MAX_REQUESTS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from distsim.errors import UserError

POLICIES = ("round_robin", "least_loaded", "prefix_affinity")
SEED = 0
START_REQUESTS = 1000
MAX_REQUESTS = 4000
SPAN_S = 120.0
MAX_TRIES = 6
_SIZE = "workload.num_requests="


@dataclass(frozen=True)
class Calibrated:
    """A kept draw: its overrides at the knee, and the calibration behind it."""

    overrides: list[str]
    note: str


def capacity(overrides: list[str], requests: int, policy: str) -> dict[str, Any]:
    """summary.json's capacity section for ``policy`` on a draw at ``requests`` requests, seed ``SEED``."""
    from distsim import load_config, simulate

    cfg = load_config([*overrides, f"{_SIZE}{requests}", f"policy={policy}", "fitness=capacity", f"seed={SEED}"],
                      config_name="search")  # fmt: skip
    return simulate(cfg).summary["capacity"]


@cache
def _arrival(workload: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from distsim.config.compose import CONF_DIR

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "workload" / f"{workload}.yaml").arrival)


def load_overrides(workload: str, factor: float) -> list[str]:
    """The workload's arrival rates times ``factor`` (a Poisson rate, or an MMPP's rates)."""
    arrival = _arrival(workload)
    if arrival.get("rates_rps"):
        return [f"workload.arrival.rates_rps=[{','.join(f'{r * factor:.4g}' for r in arrival['rates_rps'])}]"]
    return [f"workload.arrival.rate_rps={arrival['rate_rps'] * factor:.4g}"]


Measure = Callable[[list[str], int, str], dict[str, Any]]  # as capacity's
Draw = Callable[[np.random.Generator, str], list[str]]  # a part of the space ("train" or "holdout") to overrides


def calibrate(overrides: list[str], rows: list[dict[str, Any]], where: dict[str, Any], measure: Measure = capacity) -> Calibrated | None:
    """Steps 1-4 for one draw; every measurement is appended to ``rows`` (with ``where``'s fields)."""
    base = [o for o in overrides if not o.startswith(_SIZE)]
    requests = START_REQUESTS
    while True:
        caps = {p: measure(base, requests, p) for p in POLICIES}
        rows += [{**where, "requests": requests, "policy": p, "capacity_rps": c["requests_per_s"],
                  "at_roofline": c["at_roofline"], "offered_rps": c["offered_rps"]} for p, c in caps.items()]  # fmt: skip
        short = any(c["at_roofline"] for c in caps.values())
        if not short or requests >= MAX_REQUESTS:
            break
        requests = min(2 * requests, MAX_REQUESTS)
    best = max(c["requests_per_s"] for c in caps.values())
    if short or best <= 0:
        return None
    offered = next(iter(caps.values()))["offered_rps"]
    workload = next(o.split("=", 1)[1] for o in base if o.startswith("workload="))
    size = int(min(MAX_REQUESTS, max(requests, round(best * SPAN_S))))
    kept = [*base, f"{_SIZE}{size}", *load_overrides(workload, best / offered)]
    note = ", ".join(f"{p} {c['requests_per_s']:g}" for p, c in caps.items())
    return Calibrated(kept, f"capacity req/s at {requests} requests, seed {SEED}: {note}; kept at {best:g} req/s, {size} requests")


def calibrated_families(
    train: int, holdout: int, seed: int, draw: Draw, *, echo: bool = False, measure: Measure = capacity
) -> tuple[dict[str, dict[str, str]], dict[str, str], pd.DataFrame]:
    """Like distsim.search.scenarios.families, every family calibrated: (families, a note per family, every
    draw tried and its built-ins' capacities). ``draw``: one scenario's overrides from a part of the space
    (distsim.search.scenarios.draw)."""
    rng = np.random.default_rng(seed)
    drawn: dict[str, dict[str, str]] = {"train": {}, "holdout": {}}
    notes: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for part, n in (("train", train), ("holdout", holdout)):
        for i in range(n):
            name = f"{part}_{i}"
            for attempt in range(MAX_TRIES):
                overrides = draw(rng, part)
                where = {"family": name, "attempt": attempt, "overrides": " ".join(overrides)}
                kept = calibrate(overrides, rows, where, measure)
                if kept is not None:
                    break
            else:
                raise UserError(f"search error: {name}: no usable draw in {MAX_TRIES} tries (distsim.search.calibrate)")
            drawn[part][name] = " ".join(kept.overrides)
            notes[name] = kept.note
            if echo:
                print(f"{name}: {kept.note}", flush=True)
    table = pd.DataFrame(rows)
    table["kept"] = table["attempt"] == table.groupby("family")["attempt"].transform("max")  # the last try of each
    return drawn, notes, table
