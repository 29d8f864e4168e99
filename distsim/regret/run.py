"""Counterfactual regret of a run's routing decisions, by fork and replay (distsim.regret.fork).

K decisions are drawn from the run's routed requests with the "regret" random stream (so the same config
and seed draw the same ones), each replayed on every candidate instance for the horizon. Per decision and
metric (the request's TTFT, its E2E, the window's total latency), regret = the value under the policy's own
choice minus the best candidate's (>= 0; 0 when the choice was as good as any). Censored values (the request
had not reached its first or last token by the replay's stop) are lower bounds: a regret computed from one is
flagged. The run's own outputs are untouched: the replays run after it, in forked processes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.config.regret import RegretSettings
from distsim.errors import ConfigError
from distsim.events.rng import stream
from distsim.regret.fork import Decision, replay

if TYPE_CHECKING:
    import pandas as pd

    from distsim.resolve import Scenario

METRICS = ("ttft", "e2e", "window")  # the request's TTFT and E2E; the window's total latency


def check_supported(scenario: Scenario) -> None:
    """Regret replays one cluster's router: refuse what it cannot replay, naming the key."""
    if not hasattr(os, "fork"):
        raise ConfigError("regret.samples", "fork-and-replay needs os.fork (Linux or macOS)")
    if scenario.cells.enabled:
        raise ConfigError("regret.samples", "fork-and-replay regret replays one cluster's router: not with cluster.cells.count > 1")
    if scenario.runtimes:
        raise ConfigError("regret.samples", "fork-and-replay regret replays the LLM router: not with batching-runtime pools")
    if getattr(scenario.workload, "driven", False):  # its latency bound lists a fixed stream of arrivals
        raise ConfigError("regret.samples", "fork-and-replay regret replays a fixed request stream: not with "
                          "closed-loop clients or sessions (workload.clients, workload.sessions.closed_loop)")


def sample(requests: pd.DataFrame, k: int, seed: int) -> list[int]:
    """``k`` routed requests of the run (every one if fewer), drawn from the "regret" stream, by id."""
    routed = requests[(requests["instance"] >= 0) & (requests["status"].astype(str) != "rejected")]
    ids = np.sort(routed["request_id"].to_numpy(dtype=np.int64))
    if k >= ids.size:
        return ids.tolist()
    return np.sort(stream(seed, "regret").choice(ids, size=k, replace=False)).tolist()


def regret(scenario: Scenario, requests: pd.DataFrame, settings: RegretSettings) -> list[Decision]:
    """Replay ``settings.samples`` decisions of the run whose requests table is ``requests``."""
    check_supported(scenario)
    pinned = choices(scenario, requests) if settings.pin_later else None
    return replay(scenario, set(sample(requests, settings.samples, scenario.seed)), settings.horizon_us, pinned)


def choices(scenario: Scenario, requests: pd.DataFrame) -> dict[int, tuple[int, ...]]:
    """The run's routing decisions: request id -> the instances its routers chose: under P/D the prefill and
    the decode instance (the prefill one -1 where the P/D decider kept the request on its decode instance),
    else the one instance. Every stage is pinned: a decode pick left free would move with the sampled
    decision, and with the P/D decider so would whether later requests disaggregate."""
    routed = requests[requests["instance"] >= 0]
    ids, served = routed["request_id"].tolist(), routed["instance"].tolist()
    if not any(pool.role != "mixed" for pool in scenario.pools):
        return {i: (s,) for i, s in zip(ids, served)}
    return {i: (p, s) for i, p, s in zip(ids, routed["prefill_instance"].tolist(), served)}


def _values(decision: Decision, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's value (microseconds) and censoring of ``metric``."""
    outs = decision.outcomes
    if metric == "window":
        return np.array([o.window_us for o in outs], dtype=np.int64), np.zeros(len(outs), dtype=bool)
    values = np.array([getattr(o, f"{metric}_us") for o in outs], dtype=np.int64)
    return values, np.array([getattr(o, f"{metric}_censored") for o in outs], dtype=bool)


def decision_table(decisions: list[Decision]) -> pd.DataFrame:
    """regret.csv: one row per sampled decision: the chosen and the best candidate per metric, the regret."""
    import pandas as pd

    rows = []
    for d in decisions:
        row: dict[str, Any] = {"request_id": d.request_id, "time_ms": d.time_us / 1000.0,
                               "horizon_end_ms": d.stop_us / 1000.0, "candidates": len(d.members),
                               "chosen": d.members[d.chosen]}
        for metric in METRICS:
            values, censored = _values(d, metric)
            best = int(np.argmin(values))
            unit = 1e6 if metric == "window" else 1000.0
            suffix = "s" if metric == "window" else "ms"
            row[f"{metric}_chosen_{suffix}"] = values[d.chosen] / unit
            row[f"{metric}_best_{suffix}"] = values[best] / unit
            row[f"{metric}_best_instance"] = d.members[best]
            row[f"{metric}_regret_{suffix}"] = (values[d.chosen] - values[best]) / unit
            row[f"{metric}_censored"] = bool(censored[d.chosen] or censored[best])
        rows.append(row)
    return pd.DataFrame(rows)


def alternatives_table(decisions: list[Decision]) -> pd.DataFrame:
    """regret_alternatives.csv: one row per sampled decision and candidate instance."""
    import pandas as pd

    rows = [
        {"request_id": d.request_id, "instance": d.members[i], "chosen": i == d.chosen,
         "ttft_ms": o.ttft_us / 1000.0, "ttft_censored": o.ttft_censored, "e2e_ms": o.e2e_us / 1000.0,
         "e2e_censored": o.e2e_censored, "window_s": o.window_us / 1e6}
        for d in decisions for i, o in enumerate(d.outcomes)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def summary(decisions: list[Decision], settings: RegretSettings) -> dict[str, Any]:
    """regret.json's figures: per metric, the regret's mean, p50, p90 and max, the share of decisions with a
    regret > 0, and the mean chosen and best values."""
    table = decision_table(decisions)
    out: dict[str, Any] = {"samples": len(decisions), "horizon_s": settings.horizon_us / 1e6,
                           "pin_later": settings.pin_later}
    for metric in METRICS:
        suffix = "s" if metric == "window" else "ms"
        if table.empty:
            out[f"{metric}_{suffix}"] = None
            continue
        r = table[f"{metric}_regret_{suffix}"].to_numpy(dtype=np.float64)
        out[f"{metric}_{suffix}"] = {
            "regret_mean": round(float(r.mean()), 4), "regret_p50": round(float(np.percentile(r, 50)), 4),
            "regret_p90": round(float(np.percentile(r, 90)), 4), "regret_max": round(float(r.max()), 4),
            "share_positive": round(float((r > 0).mean()), 4),
            "chosen_mean": round(float(table[f"{metric}_chosen_{suffix}"].mean()), 4),
            "best_mean": round(float(table[f"{metric}_best_{suffix}"].mean()), 4),
            "censored": int(table[f"{metric}_censored"].sum()),
        }  # fmt: skip
    return out


def write_regret(out_dir: str | os.PathLike, scenario: Scenario, requests: pd.DataFrame,
                 settings: RegretSettings) -> dict[str, Any]:
    """Replay the sampled decisions and write regret.csv, regret_alternatives.csv and regret.json (the
    regret's figures and the latency lower bound, distsim.regret.bound, over the run's requests) into
    ``out_dir``; returns regret.json's content."""
    import json

    from distsim import outputs
    from distsim.regret.bound import bound_summary, latency_bounds

    decisions = regret(scenario, requests, settings)
    figures = summary(decisions, settings)
    figures["bound"] = bound_summary(latency_bounds(scenario), requests)
    out = outputs.prepare_dir(out_dir)
    with outputs.all_or_none():  # regret.json last: with it, the tables are complete
        outputs.write_csv(out / "regret.csv", decision_table(decisions))
        outputs.write_csv(out / "regret_alternatives.csv", alternatives_table(decisions))
        outputs.write_text(out / "regret.json", json.dumps(figures, indent=2, allow_nan=False) + "\n")
    return figures


def regret_line(figures: dict[str, Any]) -> str:
    """One line for the terminal: the regret of the sampled decisions, TTFT and E2E."""
    parts = [f"regret       {figures['samples']} decisions replayed for {figures['horizon_s']:g} s:"]
    for metric in ("ttft_ms", "e2e_ms"):
        f = figures[metric]
        if f is not None:
            parts.append(f"{metric[:-3]} mean {f['regret_mean']:,.1f} ms, p90 {f['regret_p90']:,.1f} ms, "
                         f"{100 * f['share_positive']:.0f}% > 0;")
    return " ".join(parts).rstrip(";")
