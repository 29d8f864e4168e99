"""Plain-text rendering of a run's summary for the terminal."""

from __future__ import annotations

from typing import Any


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def format_summary(summary: dict[str, Any], out_dir: str | None = None, fitness: str = "fitness") -> str:
    """The summary table; ``fitness`` names the fitness figure and its unit (metrics.fitness.fitness_label)."""
    r = summary["requests"]
    lines = [
        f"requests  arrived {r['arrived']:,}  completed {r['completed']:,}  rejected {r['rejected']:,}  "
        f"dropped {r['dropped']:,}  unfinished {r['unfinished']:,}  preempted {r['preempted']:,}",
        "",
        f"{'LLM latency ms' if 'types' in summary else 'latency (ms)':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        d = summary[key]
        lines.append(f"{key[:-3]:<14}" + "".join(f"{_fmt(d[q]):>10}" for q in ("mean", "p50", "p90", "p99", "max")))
    t = summary["throughput"]
    g = summary["goodput"]
    lines += [
        "",
        f"throughput    {_fmt(t['requests_per_s'], 2)} req/s   {_fmt(t['input_tokens_per_s'], 0)} in tok/s   "
        f"{_fmt(t['output_tokens_per_s'], 0)} out tok/s",
        f"goodput       {_fmt(g['requests_per_s'], 2)} req/s   SLO attainment {_fmt(g['slo_attainment'], 3)}",
        f"prefix cache hit rate {_fmt(summary['prefix_cache_hit_rate'], 3)}   GPU utilization "
        f"{_fmt(summary['gpu_utilization'], 3)}   Jain fairness {_fmt(summary['jain_fairness'], 3)}",
        f"cost          ${_fmt(summary['cost_usd_per_1k_tokens'], 8)} per 1k tokens (input + output), as in summary.json",
        f"fitness       {_fmt(summary['fitness'], 4)}   ({fitness})",
        f"simulated     {_fmt(summary['sim']['simulated_s'], 2)} s in {summary['sim']['events']:,} events (seed {summary['sim']['seed']})",
    ]
    if "capacity" in summary:  # fitness.kind capacity: the rate found by bisection
        lines.insert(-2, _capacity_line(summary["capacity"]))
    if "window" in summary:  # a measurement window: what the figures above count
        lines.insert(-1, _window_line(summary["window"]))
    for name, pool in summary.get("autoscale", {}).get("pools", {}).items():  # autoscaled pools
        lines.insert(-1, _autoscale_line(name, pool))
    for name, t in summary.get("types", {}).items():  # request types (workload.mix)
        lines.insert(-1, _type_line(name, t))
    if out_dir:
        lines.append(f"outputs       {out_dir}")
    return "\n".join(lines)


def _capacity_line(c: dict[str, Any]) -> str:
    if c.get("not_measured"):
        return f"capacity      not measured: {c['not_measured']}"
    hi = "none failed" if c["bracket_rps"][1] is None else f"{_fmt(c['bracket_rps'][1], 2)} failed"
    if c.get("at_roofline"):
        hi = "met at the roofline: too few requests to tell"
    return (
        f"capacity      {_fmt(c['requests_per_s'], 2)} req/s with {c['share']:g} of requests meeting both SLOs ({hi};"
        f" offered {_fmt(c['offered_rps'], 2)}, {c['runs']} runs)"
    )


def _window_line(w: dict[str, Any]) -> str:
    end = "end of run" if w["end_ms"] is None else f"{w['end_ms'] / 1000.0:,.2f} s"
    return (
        f"window        {w['measured']:,} requests arriving in [{w['start_ms'] / 1000.0:,.2f} s, {end}) counted"
        f" ({w['excluded_before']:,} before, {w['excluded_after']:,} after); rates over {_fmt(w['span_s'], 2)} s"
    )


def _autoscale_line(name: str, p: dict[str, Any]) -> str:
    return (
        f"autoscale     {name} ({p['kind']}): {p['initial']} -> peak {p['peak_replicas']} of {p['max']} replicas, "
        f"mean {_fmt(p['mean_replicas'], 2)}; {p['scale_ups']} up, {p['scale_downs']} down; "
        f"{_fmt(p['gpu_hours'], 3)} GPU-h, ${_fmt(p['cost_usd'], 4)}"
    )


def _type_line(name: str, t: dict[str, Any]) -> str:
    lat, b = t["latency_ms"], t.get("batches")
    batch = f"; batch items mean {_fmt(b['items']['mean'], 2)}, max {_fmt(b['items']['max'], 0)}" if b else ""
    return (
        f"type {name:<8} {t['requests']:,} requests, SLO {_fmt(t['slo_attainment'], 3)}, latency p50/p99 "
        f"{_fmt(lat['p50'])}/{_fmt(lat['p99'])} ms, {_fmt(t['throughput']['requests_per_s'], 2)} req/s{batch}"
    )

