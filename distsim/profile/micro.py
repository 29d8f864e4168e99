"""The operators alone, each timed by the backend: the device's peaks, the model's GEMMs by rows,
attention by context and KV heads, the sampler's paths by vocabulary, and a MoE model's router, top-k
and grouped expert GEMMs by rows per expert. They explain the step
tables (which term a step's miss is in) and give ``profile.json`` the device's measured peaks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from distsim.profile.backend import Backend, Timing
from distsim.profile.forward import Shard, dispatch, routing
from distsim.profile.grid import Grid


def timing_row(t: Timing) -> dict[str, float]:
    return {"measured_ms": t.median_us / 1e3, "p10_ms": t.p10_us / 1e3, "p90_ms": t.p90_us / 1e3, "repetitions": t.repetitions}


@dataclass(frozen=True)
class Peaks:
    """The device's measured matmul rate and memory bandwidth (a square matmul; a copy, bytes read
    plus written, as micro_peak.csv counts them)."""

    matmul_tflops: float
    copy_tbps: float
    rows: list[dict]


def peaks(b: Backend, g: Grid, target_s: float) -> Peaks:
    """Each measured twice, the faster kept: the first round warms the device up (a CPU's BLAS threads
    start, a GPU's clocks ramp) and would otherwise be the slowest figure of the profile."""
    n = g.peak_size
    x, w = b.randn((n, n)), b.randn((n, n))
    mm = min((b.time(lambda: b.matmul(x, w), target_s) for _ in range(2)), key=lambda t: t.median_us)
    elems = g.copy_bytes // b.device().dtype_bytes
    src = b.randn((elems,))
    cp = min((b.time(lambda: b.add(src, 0.0), target_s) for _ in range(2)), key=lambda t: t.median_us)
    tflops = 2 * n**3 / (mm.median_us * 1e-6) / 1e12
    tbps = 2 * elems * b.device().dtype_bytes / (cp.median_us * 1e-6) / 1e12
    rows = [
        {"what": f"matmul {n}x{n}x{n}", **timing_row(mm), "rate": tflops, "unit": "TFLOP/s"},
        {"what": f"copy {elems} elements (read + write)", **timing_row(cp), "rate": tbps, "unit": "TB/s"},
    ]
    return Peaks(tflops, tbps, rows)


def with_gemms(p: Peaks, gemm_rows: list[dict]) -> Peaks:
    """``p`` with the fastest GEMM rate as the matmul peak where a model's GEMM beat the square matmul
    (a CPU's BLAS may thread the square one worse than the model's shapes): a peak is what the device
    reached, and the step model's compute efficiency is a fraction of it (at most 1)."""
    best = max((r["tflops"] for r in gemm_rows), default=0.0)
    if best <= p.matmul_tflops:
        return p
    rows = [*p.rows, {"what": "fastest GEMM of micro_gemm (the peak used)", "measured_ms": math.nan, "p10_ms": math.nan,
                      "p90_ms": math.nan, "repetitions": 0, "rate": best, "unit": "TFLOP/s"}]
    return Peaks(best, p.copy_tbps, rows)


def gemms(b: Backend, shard: Shard, g: Grid, target_s: float) -> list[dict]:
    """Each of the shard's matmuls at each row count of the grid."""
    out = []
    for name, (k, n) in shard.gemms().items():
        w = b.randn((k, n), scale=k**-0.5)
        for m in g.gemm_rows:
            x = b.randn((m, k))
            t = b.time(lambda x=x, w=w: b.matmul(x, w), target_s)
            out.append({"gemm": name, "m": m, "k": k, "n": n, **timing_row(t), "tflops": 2 * m * k * n / (t.median_us * 1e-6) / 1e12})
    return out


def attention(b: Backend, shard: Shard, g: Grid, target_s: float) -> list[dict]:
    """Decode attention by batch, context and KV heads (the model's query heads per KV head), and one
    prefill chunk by context, at the model's heads; each with the KV bytes per second it read."""
    d, group = shard.head_dim, max(1, shard.q_heads // shard.kv_heads)
    by = b.device().dtype_bytes
    out = []
    for kv in g.attention_kv_heads:
        for c in g.attention_contexts:
            for batch in g.attention_batches:
                q = b.randn((batch, kv * group, d))
                k, v = b.randn((batch, kv, c, d)), b.randn((batch, kv, c, d))
                t = b.time(lambda q=q, k=k, v=v: b.decode_attention(q, k, v), target_s)
                kv_bytes = 2 * batch * kv * c * d * by
                out.append({"kind": "decode", "batch": batch, "context": c, "q_heads": kv * group, "kv_heads": kv,
                            "head_dim": d, **timing_row(t), "kv_tbps": kv_bytes / (t.median_us * 1e-6) / 1e12})
    for c in g.attention_contexts:
        n = c // 2
        q = b.randn((shard.q_heads, n, d))
        k, v = b.randn((shard.kv_heads, c, d)), b.randn((shard.kv_heads, c, d))
        t = b.time(lambda q=q, k=k, v=v: b.prefill_attention(q, k, v), target_s)
        out.append({"kind": "prefill", "batch": 1, "context": c, "q_heads": shard.q_heads, "kv_heads": shard.kv_heads,
                    "head_dim": d, **timing_row(t), "kv_tbps": 2 * shard.kv_heads * c * d * by / (t.median_us * 1e-6) / 1e12})
    return out


def sampler(b: Backend, g: Grid, vocab: int, target_s: float) -> list[dict]:
    """Greedy (argmax) and temperature (softmax sampling) over each vocabulary (the grid's and the
    model's) and number of sampled rows."""
    out = []
    for v in sorted({*g.sampler_vocabs, vocab}):
        for rows in g.sampler_rows:
            logits = b.randn((rows, v))
            for path, fn in (("greedy", lambda x=logits: b.argmax(x)), ("temperature", lambda x=logits: b.softmax_sample(x, 0))):
                t = b.time(fn, target_s)
                out.append({"path": path, "vocab": v, "rows": rows, **timing_row(t)})
    return out


def moe(b: Backend, shard: Shard, g: Grid, target_s: float) -> list[dict]:
    """A MoE layer's pieces at each token count of the grid, routed as the steps route
    (:func:`distsim.profile.forward.routing`): the router GEMM, its top-k, and the experts' gate_up and
    down GEMMs over their rows (the loop the forward pass runs), with the rows per expert they ran at."""
    e, k = shard.experts, shard.top_k
    gu = [b.randn(shard.gemms()["expert_gate_up"], scale=shard.hidden**-0.5) for _ in range(e)]
    dn = [b.randn(shard.gemms()["expert_down"], scale=shard.intermediate**-0.5) for _ in range(e)]
    router = b.randn(shard.gemms()["router"], scale=shard.hidden**-0.5)
    out = []
    for tokens in g.gemm_rows:
        d = dispatch(routing(tokens, e, k), e)
        h = b.randn((tokens, shard.hidden))
        xs = b.randn((tokens * k, shard.hidden))
        mid = b.randn((tokens * k, shard.intermediate))
        logits = b.matmul(h, router)
        rows = d.rows_per_expert
        shape = {"tokens": tokens, "experts": e, "top_k": k, "active_experts": len(rows),
                 "rows_per_expert": tokens * k / len(rows), "max_rows_per_expert": max(rows)}
        ops = (
            ("router", lambda h=h: b.matmul(h, router), tokens, shard.hidden, e),
            ("topk", lambda logits=logits: b.topk(logits, k), tokens, e, k),
            ("expert_gate_up", lambda xs=xs, d=d: [b.matmul(xs[lo:hi], gu[x]) for x, lo, hi in d.spans], tokens * k, shard.hidden, 2 * shard.intermediate),
            ("expert_down", lambda mid=mid, d=d: [b.matmul(mid[lo:hi], dn[x]) for x, lo, hi in d.spans], tokens * k, shard.intermediate, shard.hidden),
        )
        for op, fn, m, kk, n in ops:
            t = b.time(fn, target_s)
            flops = 2 * m * kk * n if op != "topk" else 0
            out.append({"op": op, **shape, "m": m, "k": kk, "n": n, **timing_row(t), "tflops": flops / (t.median_us * 1e-6) / 1e12})
    return out
