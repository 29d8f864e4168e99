"""One whole simulation: build the cluster and workload from a composed config, run, measure."""

from __future__ import annotations

import json
import math
import os
import resource
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from distsim import outputs
from distsim.cluster.cluster import Cluster
from distsim.cluster.pools import resolve_pools
from distsim.engine.loop import EventLoop
from distsim.errors import ConfigError
from distsim.metrics.fitness import compute_fitness
from distsim.metrics.recorder import Recorder
from distsim.metrics.summary import rnd, summarize
from distsim.request import Request


@dataclass
class SimulationResult:
    summary: dict[str, Any]
    requests: pd.DataFrame
    instances: pd.DataFrame
    perf: dict[str, Any] = field(default_factory=dict)
    decisions: pd.DataFrame | None = None  # per routing decision, when policy.trace_decisions is on

    def write(self, out_dir: str | os.PathLike, *, write_requests: bool = True) -> None:
        """requests.parquet, instances.parquet, decisions.parquet, perf.json, then summary.json into ``out_dir``.

        Each file is written atomically (distsim.outputs) and summary.json last, after removing an earlier
        run's, so a complete summary.json means a complete run. Files an earlier run left there that this
        one does not write are removed, so the directory never mixes two runs. Raises OutputError.
        """
        out = outputs.prepare_dir(out_dir)
        skipped = [] if write_requests else ["requests.parquet"]
        skipped += [] if self.decisions is not None else ["decisions.parquet"]
        outputs.remove(out / name for name in ("summary.json", *skipped))
        if write_requests:
            outputs.write_parquet(out / "requests.parquet", self.requests)
        outputs.write_parquet(out / "instances.parquet", self.instances)
        if self.decisions is not None:
            outputs.write_parquet(out / "decisions.parquet", self.decisions)
        outputs.write_text(out / "perf.json", json.dumps(self.perf, indent=2) + "\n")
        outputs.write_text(out / "summary.json", summary_json(self.summary))


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def _check_top(cfg: Any) -> None:
    if cfg.seed is None or cfg.seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0 (got {cfg.seed!r})")
    h = cfg.sim.horizon_s
    if h is not None and not (h > 0 and math.isfinite(h)):
        raise ConfigError("sim.horizon_s", f"must be a finite number > 0, or null for no horizon (got {h!r})")


def simulate(cfg: Any, requests: Iterable[Request] | None = None) -> SimulationResult:
    """Run the simulation that ``cfg`` (a composed config, see load_config) describes.

    ``requests`` replaces the configured workload (tests and validation feed exact request lists).
    Every config value is validated before the first event runs.
    """
    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    _check_top(cfg)
    pools = resolve_pools(cfg.cluster)
    workload_summary = None
    if requests is None:
        from distsim.workload import build_workload

        requests = build_workload(cfg.workload, seed=int(cfg.seed), block_size=pools[0].engine.block_size)
        workload_summary = requests.summary()  # traces: rows read and skipped; None for synthetic
    horizon_us = None if cfg.sim.horizon_s is None else int(round(cfg.sim.horizon_s * 1e6))
    loop = EventLoop(horizon_us)
    slo = cfg.workload.slo
    recorder = Recorder(float(slo.ttft_ms), float(slo.tpot_ms))
    cluster = Cluster(
        pools,
        cfg.policy,
        loop,
        recorder,
        int(cfg.seed),
        fast_forward=bool(cfg.sim.fast_forward),
        signals_cfg=cfg.signals,
        transfer_cfg=cfg.cluster.kv_transfer,
        default_ttft_slo_ms=float(slo.ttft_ms),
    )
    cluster.feed(requests)
    end_us = loop.run()
    cluster.finish(horizon_us)
    cluster.warn_refusals()

    table = recorder.table()
    instances = instance_table(cluster)
    itl_values, itl_weights = itl_samples(cluster)
    start_us = cluster.first_arrival_us or 0
    summary = summarize(
        table, instances, itl_values, itl_weights, seed=int(cfg.seed), events=loop.events, start_us=start_us, end_us=end_us
    )
    if cluster.disaggregated:
        summary["kv_transfer"] = {
            "transfers": cluster.transfers,
            "mean_ms": rnd(cluster.transfer_us_total / cluster.transfers / 1000.0) if cluster.transfers else None,
            "gb": rnd(cluster.transfer_bytes_total / 1e9, 6),
        }
    summary["signals"] = {"scrapes": cluster.board.scrapes}
    if workload_summary is not None:
        summary["workload"] = workload_summary
    summary["fitness"] = compute_fitness(summary, cfg.fitness)
    del summary["_derived"]
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    perf = {
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "events": loop.events,
        "events_per_s": round(loop.events / wall, 1) if wall > 0 else None,
        "requests_per_cpu_s": round(len(table) / cpu, 1) if cpu > 0 else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    decisions = cluster.decision_table() if cluster.trace else None
    return SimulationResult(summary, table, instances, perf, decisions)


def instance_table(cluster: Cluster) -> pd.DataFrame:
    rows = []
    for inst in cluster.instances:
        s = inst.stats
        pool = cluster.pool_of[inst.index]
        total = inst.kv.total
        rows.append(
            {
                "instance": inst.index,
                "pool": inst.pool,
                "role": inst.role,
                "hardware": inst.hardware,
                "gpus": inst.gpus,
                "price_usd_per_gpu_hour": float(pool.hardware.price_usd_per_gpu_hour),
                "total_kv_blocks": total,
                "busy_ms": s.busy_us / 1000.0,
                "steps": s.steps,
                "prefill_tokens": s.prefill_tokens,
                "decode_tokens": s.decode_tokens,
                "peak_kv_blocks": s.peak_used_blocks,
                "peak_kv_utilization": s.peak_used_blocks / total,
                "kv_evictions": inst.kv.evictions,
                "preemptions": s.preemptions,
                "admitted": s.admitted,
                "completed": s.completed,
                "handed_off": s.handed_off,
                "dropped": s.dropped,
                "too_long": s.too_long,
                "cached_tokens": s.cached_tokens,
                "prompt_tokens": s.prompt_tokens,
            }
        )
    return pd.DataFrame(rows)


def itl_samples(cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """All inter-token gaps as (values in microseconds, weights)."""
    values: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for inst in cluster.instances:
        s = inst.stats
        values.append(np.asarray(s.itl_step_durations, dtype=np.int64))
        weights.append(np.asarray(s.itl_step_weights, dtype=np.int64))
        if s.itl_run_counts:
            values.append(np.frombuffer(s.itl_run_durations, dtype=np.int64))
            weights.append(np.repeat(np.asarray(s.itl_run_weights, dtype=np.int64), s.itl_run_counts))
        if s.itl_single:
            values.append(np.asarray(s.itl_single, dtype=np.int64))
            weights.append(np.ones(len(s.itl_single), dtype=np.int64))
    if not values:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(values).astype(np.float64), np.concatenate(weights).astype(np.float64)
