"""Measure, on one GPU, what pins a single-GPU serving term: sampling, CUDA-graph padding, host step loop.

The step tables time a model's kernels; a vLLM server adds work around them. This script times the
parts of that work one GPU can show, with no vLLM and no network (PyTorch only):

1. ``sampling.csv``: vLLM V1's sampler steps on logits [B, V] (cast to fp32, temperature, greedy
   argmax; softmax + exponential-race sampling ``argmax(probs / q)``; torch.multinomial for
   comparison; top-k/top-p by sort, the PyTorch fallback; log-softmax for logprobs), each timed eager
   (CUDA events and host wall clock) and as a replayed CUDA graph (device time alone).
   ``lm_head.csv``: the logits GEMM [B, hidden] x [hidden, V]. ``d2h.csv``: copying B sampled token
   ids to the host (``.tolist()``, ``.cpu()``, a non-blocking copy into pinned memory + event sync).
2. ``graph.csv``: one decode step of a Llama-3.1-8B-shaped stack (32 layers, hidden 4096, 32 query and
   8 KV heads, SwiGLU 14336; random bf16 weights; per-layer KV caches of a fixed length per sequence)
   eager and as a CUDA-graph replay, at vLLM's default capture sizes and at sizes between them.
   ``loop.csv``: a synchronous engine loop around that graph (inputs, replay, lm_head, greedy sample,
   token copy, bookkeeping), its step time beside the sum of its parts.
3. ``host.csv``: the CPU side of a step loop by batch size, phase by phase: building the step's inputs
   (Python per-request work into persistent pinned numpy views), non-blocking copies to the GPU, the
   sync on the sampled tokens, and per-sequence output bookkeeping (append, stop checks, an output
   record). A stand-in for vLLM's loop, not vLLM.

Plus ``env.json`` (versions, GPU, clocks from nvidia-smi, CPU) and ``log.txt`` when run with tee.
Rows are appended and flushed as they are measured, so a run cut short still returns its data. Every
size list is fixed and every random tensor comes from a seeded generator: the work measured is the
same on every run. ``scripts/analyse_serving_h100.py`` fits the summary from these files.

    PYTHONUNBUFFERED=1 python3 scripts/measure_serving_h100.py --out OUT          # on the GPU (~2.5 min)
    PYTHONUNBUFFERED=1 python scripts/measure_serving_h100.py --out /tmp/x --smoke  # CPU, tiny sizes
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
VOCABS = (32000, 32064, 128256, 151936)
HIDDENS = (4096, 5120, 8192)
TOP_P, TOP_K, TEMPERATURE = 0.95, 50, 0.7
SAMPLING_COPIES = 5  # sampler calls per captured graph: device time per call without the replay's launch


def vllm_capture_sizes(max_num_seqs: int = 256) -> list[int]:
    """vLLM's default CUDA-graph capture sizes (vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes)."""
    top = min(max_num_seqs * 2, 512)
    sizes = [s for s in (1, 2, 4) if s <= top]
    sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    return sizes


BETWEEN = (3, 5, 9, 17, 33, 65, 100, 129, 200, 257, 300, 400, 500)


@dataclass(frozen=True)
class Plan:
    """Sizes and repeat counts of one run (the GPU run or the CPU smoke test)."""

    device: str
    batches: tuple[int, ...]
    vocabs: tuple[int, ...]
    hiddens: tuple[int, ...]
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    kv_lens: tuple[tuple[int, int], ...]  # (tokens per sequence, largest batch at that length)
    graph_sizes: tuple[int, ...]
    loop_sizes: tuple[int, ...]
    host_batches: tuple[int, ...]
    warmup: int
    reps: int
    host_steps: int
    deadline_s: float


def make_plan(smoke: bool, deadline_s: float) -> Plan:
    if smoke:
        return Plan("cpu", (1, 4, 16), (512, 1000), (64,), 2, 64, 4, 2, 16, 128,
                    ((32, 16), (64, 8)), (1, 2, 3, 4, 8, 9, 16), (1, 8), (1, 4, 16), 1, 3, 20, deadline_s)
    sizes = sorted(set(vllm_capture_sizes(256)) | set(BETWEEN))
    return Plan("cuda", BATCHES, VOCABS, HIDDENS, 32, 4096, 32, 8, 128, 14336,
                ((512, 512), (2048, 128)), tuple(sizes), (1, 8, 32, 64, 128, 256, 512), BATCHES,
                3, 15, 200, deadline_s)


class Rows:
    """A CSV file written row by row and flushed, so a run cut short keeps what it measured."""

    def __init__(self, path: Path, fields: list[str]):
        self.fields = fields
        self.fh = path.open("w", newline="")
        self.w = csv.DictWriter(self.fh, fieldnames=fields)
        self.w.writeheader()
        self.fh.flush()

    def add(self, **row) -> None:
        self.w.writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
        self.fh.flush()


class Timer:
    """Device time by CUDA events and host time by perf_counter (with a sync); medians of repeats."""

    def __init__(self, device: str, warmup: int, reps: int):
        self.cuda = device == "cuda"
        self.warmup, self.reps = warmup, reps

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn, copies: int = 1, wall: bool = True) -> tuple[float, float]:
        """(median device us, median wall us) of fn, each rep timed alone after a sync, over copies.

        Device time between two CUDA events; wall time in a second loop without events (sync, start
        the clock, fn, sync, stop), so neither pays for the other's records."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        dev, walls = [], []
        for _ in range(self.reps):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                dev.append(a.elapsed_time(b) * 1e3 / copies)
        for _ in range(self.reps if wall or not self.cuda else 0):
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            walls.append((time.perf_counter() - t0) * 1e6 / copies)
        return statistics.median(dev or walls), statistics.median(walls) if walls else float("nan")

    def wall(self, fn) -> float:
        """Median host us of fn that syncs by itself (a token copy): no sync after it, none of its cost hidden."""
        for _ in range(self.warmup):
            fn()
        out = []
        for _ in range(self.reps):
            self.sync()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(out)

    def enqueue(self, fn) -> float:
        """Median host us to enqueue fn (no sync inside): the launch cost when the GPU is not the limit."""
        out = []
        for _ in range(self.reps):
            self.sync()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        self.sync()
        return statistics.median(out)

    def graph(self, fn, copies: int = 1) -> tuple[float, float]:
        """(median device us, median wall us) of fn captured copies times in one CUDA graph and replayed,
        per copy: with copies > 1 the replay's own launch (about 10 us on the device) is spread out.

        nan off the GPU, or where the capture fails (recorded, not fatal)."""
        nan = (float("nan"), float("nan"))
        if not self.cuda:
            return nan
        try:
            g = capture(fn if copies == 1 else lambda: [fn() for _ in range(copies)])[0]
        except RuntimeError as e:
            print(f"  graph capture failed: {str(e).splitlines()[0][:120]}")
            torch.cuda.synchronize()
            return nan
        res = self.time(g.replay, copies, wall=copies == 1)
        del g
        return res


def capture(fn):
    """(graph, output) of fn captured in a CUDA graph after two warm-up calls on a side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outp = fn()
    return g, outp


def past(plan: Plan, t_start: float, what: str) -> bool:
    """True once the section's share of the deadline is spent: a slow section cannot starve the rest."""
    share = {"graph": 0.5, "loop": 0.55, "sampling": 0.85, "lm_head": 0.9}.get(what, 1.0)
    if time.perf_counter() - t_start > plan.deadline_s * share:
        print(f"deadline reached: skipping the rest of {what}")
        return True
    return False


# ---------------------------------------------------------------- 1. sampling, lm_head, d2h


def top_k_top_p_sort(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside top-k and top-p by one ascending sort (the shape of vLLM's PyTorch path)."""
    srt, idx = logits.sort(dim=-1, descending=False)
    kth = srt.gather(1, (srt.size(1) - k).unsqueeze(1))
    srt.masked_fill_(srt < kth, float("-inf"))
    cum = srt.softmax(dim=-1).cumsum_(dim=-1)
    drop = cum <= (1 - p).unsqueeze(1)
    drop[:, -1] = False
    srt.masked_fill_(drop, float("-inf"))
    return srt.scatter(dim=-1, index=idx, src=srt)


def exp_race(probs: torch.Tensor) -> torch.Tensor:
    """Sample one token per row as argmax(probs / q), q ~ Exp(1): vLLM's sync-free random sampler.

    The default generator (seeded in main): a CUDA graph captures its state, not a private one's."""
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=-1)


def sampling_ops(logits16: torch.Tensor) -> dict:
    """The sampler variants timed per (B, V); each takes the bf16 logits the lm_head produced."""
    B = logits16.shape[0]
    dev = logits16.device
    temp = torch.full((B,), TEMPERATURE, device=dev)
    k = torch.full((B,), TOP_K, device=dev, dtype=torch.long)
    p = torch.full((B,), TOP_P, device=dev)

    def fp32():
        return logits16.float()

    def greedy():
        return logits16.float().argmax(dim=-1)

    def random_exp():
        x = logits16.float().div_(temp.unsqueeze(1))
        return exp_race(x.softmax(dim=-1))

    def random_multinomial():
        x = logits16.float().div_(temp.unsqueeze(1))
        return torch.multinomial(x.softmax(dim=-1), 1).view(-1)

    def topk_topp_sort():
        x = logits16.float().div_(temp.unsqueeze(1))
        return exp_race(top_k_top_p_sort(x, k, p).softmax(dim=-1))

    def topk_only():
        x = logits16.float().div_(temp.unsqueeze(1))
        kth = x.topk(TOP_K, dim=-1).values[:, -1:]
        return exp_race(x.masked_fill_(x < kth, float("-inf")).softmax(dim=-1))

    def logprobs():
        return logits16.float().log_softmax(dim=-1)

    def sort_only():
        return logits16.float().sort(dim=-1)

    return {"fp32_cast": fp32, "greedy": greedy, "random_exp": random_exp,
            "random_multinomial": random_multinomial, "topk_topp_sort": topk_topp_sort,
            "topk_only": topk_only, "logprobs": logprobs, "sort_only": sort_only}


def measure_sampling(plan: Plan, out: Path, t_start: float) -> None:
    tm = Timer(plan.device, plan.warmup, plan.reps)
    gen = torch.Generator(device=plan.device).manual_seed(1)
    rows = Rows(out / "sampling.csv", ["vocab", "batch", "op", "eager_dev_us", "eager_wall_us", "graph_us",
                                       "graph1_us"])
    for V in plan.vocabs:
        for B in plan.batches:
            if past(plan, t_start, "sampling"):
                return
            logits = torch.randn(B, V, device=plan.device, generator=gen).mul_(3).to(torch.bfloat16)
            for op, fn in sampling_ops(logits).items():
                d, w = tm.time(fn)
                # torch.multinomial checks its input with a host sync: it cannot be captured
                nan = float("nan")
                gd = nan if op == "random_multinomial" else tm.graph(fn, SAMPLING_COPIES)[0]
                g1 = nan if op == "random_multinomial" else tm.graph(fn)[0]
                rows.add(vocab=V, batch=B, op=op, eager_dev_us=d, eager_wall_us=w, graph_us=gd, graph1_us=g1)
            print(f"sampling V={V} B={B}: greedy/random/topk-topp rows written")
            del logits
    rows = Rows(out / "lm_head.csv", ["hidden", "vocab", "batch", "dev_us", "wall_us", "tflops", "weight_gbps"])
    for h in plan.hiddens:
        for V in plan.vocabs:
            w16 = torch.randn(V, h, device=plan.device, generator=gen).div_(h ** 0.5).to(torch.bfloat16)
            for B in plan.batches:
                if past(plan, t_start, "lm_head"):
                    return
                x = torch.randn(B, h, device=plan.device, generator=gen).to(torch.bfloat16)
                d, wl = tm.time(lambda x=x, w16=w16: F.linear(x, w16))
                rows.add(hidden=h, vocab=V, batch=B, dev_us=d, wall_us=wl, tflops=2 * B * h * V / d / 1e6,
                         weight_gbps=2 * V * h / d / 1e3)
            print(f"lm_head h={h} V={V} done")
    rows = Rows(out / "d2h.csv", ["batch", "method", "wall_us"])
    pin = plan.device == "cuda"
    for B in plan.batches:
        ids = torch.randint(0, 32000, (B,), device=plan.device, generator=gen)
        host = torch.empty(B, dtype=torch.long, pin_memory=pin)

        def nonblocking(host=host, ids=ids):
            host.copy_(ids, non_blocking=True)
            if pin:
                ev = torch.cuda.Event()
                ev.record()
                ev.synchronize()
            return host.tolist()

        for method, fn in (("tolist", ids.tolist), ("cpu_tolist", lambda ids=ids: ids.cpu().tolist()),
                           ("pinned_nonblocking_tolist", nonblocking)):
            rows.add(batch=B, method=method, wall_us=tm.wall(fn))
    print("d2h done")


# ---------------------------------------------------------------- 2. decode stack, eager vs graph


class Stack:
    """A Llama-shaped decoder stack for one decode step: random bf16 weights, per-layer KV caches.

    Per layer: RMSNorm, fused QKV GEMM, writing the new K and V into the cache, attention over a
    fixed-length cache (grouped-query attention as SDPA with the 4 query heads of a KV head as 4 query
    rows: the same arithmetic, no copies), O GEMM + residual, RMSNorm, gate-up GEMM, SiLU x up, down
    GEMM + residual. No rotary embedding (one small elementwise kernel in vLLM).
    """

    def __init__(self, plan: Plan, gen):
        self.p = plan
        dt, dev = torch.bfloat16 if plan.device == "cuda" else torch.float32, plan.device
        self.dt = dt
        h, q, kv, d, i = plan.hidden, plan.heads, plan.kv_heads, plan.head_dim, plan.inter

        def w(o, n):
            t = torch.empty(o, n, device=dev, dtype=dt)
            return t.normal_(0, n ** -0.5, generator=gen)

        self.layers = [dict(qkv=w((q + 2 * kv) * d, h), o=w(h, q * d), gu=w(2 * i, h), down=w(h, i),
                            n1=torch.ones(h, device=dev, dtype=dt), n2=torch.ones(h, device=dev, dtype=dt))
                       for _ in range(plan.layers)]
        self.norm = torch.ones(h, device=dev, dtype=dt)
        self.kc: list[torch.Tensor] = []
        self.vc: list[torch.Tensor] = []
        self.gen = gen

    def set_cache(self, max_b: int, length: int) -> None:
        self.kc, self.vc = [], []
        gc.collect()
        if self.p.device == "cuda":
            torch.cuda.empty_cache()
        shape = (max_b, self.p.kv_heads, length, self.p.head_dim)
        for _ in range(self.p.layers):
            self.kc.append(torch.empty(shape, device=self.p.device, dtype=self.dt).normal_(generator=self.gen))
            self.vc.append(torch.empty(shape, device=self.p.device, dtype=self.dt).normal_(generator=self.gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.p
        B = x.shape[0]
        g, d = p.heads // p.kv_heads, p.head_dim
        for lw, kc, vc in zip(self.layers, self.kc, self.vc):
            hdn = F.rms_norm(x, (p.hidden,), lw["n1"])
            qkv = F.linear(hdn, lw["qkv"])
            q, k, v = qkv.split([p.heads * d, p.kv_heads * d, p.kv_heads * d], dim=-1)
            L = kc.shape[2]
            kc[:B, :, L - 1].copy_(k.view(B, p.kv_heads, d))
            vc[:B, :, L - 1].copy_(v.view(B, p.kv_heads, d))
            att = F.scaled_dot_product_attention(q.reshape(B, p.kv_heads, g, d), kc[:B], vc[:B])
            x = x + F.linear(att.reshape(B, p.heads * d), lw["o"])
            hdn = F.rms_norm(x, (p.hidden,), lw["n2"])
            gate, up = F.linear(hdn, lw["gu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, lw["down"])
        return F.rms_norm(x, (p.hidden,), self.norm)


def count_kernels(fn, device: str) -> int:
    """Kernels one call of fn launches on the GPU (torch.profiler); -1 where the profiler is not there."""
    if device != "cuda":
        return -1
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    except Exception as e:  # the count is a detail: a missing CUPTI must not lose the timings
        print(f"  kernel count failed: {e}")
        return -1


def sdpa_backend(plan: Plan):
    """Flash attention where it runs on these shapes (recorded in env.json), else SDPA's own choice."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel
    if plan.device != "cuda":
        return nullcontext(), "default"
    q = torch.randn(2, plan.kv_heads, plan.heads // plan.kv_heads, plan.head_dim, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(2, plan.kv_heads, 64, plan.head_dim, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            F.scaled_dot_product_attention(q, kv, kv)
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION]), "flash"
    except RuntimeError as e:
        print(f"flash attention refused ({str(e)[:80]}): SDPA picks")
        return nullcontext(), "default"


def padded(n: int, sizes: list[int]) -> int:
    return next((s for s in sizes if s >= n), -1)


def measure_graph(plan: Plan, out: Path, t_start: float, env: dict) -> None:
    tm = Timer(plan.device, plan.warmup, plan.reps)
    gen = torch.Generator(device=plan.device).manual_seed(2)
    stack = Stack(plan, gen)
    captured = vllm_capture_sizes(256)
    rows = Rows(out / "graph.csv", ["kv_len", "batch", "captured", "padded_to", "eager_dev_us", "eager_wall_us",
                                    "eager_enqueue_us", "graph_us", "graph_wall_us"])
    x_all = torch.empty(max(b for _, b in plan.kv_lens), plan.hidden, device=plan.device,
                        dtype=stack.dt).normal_(generator=gen)
    ctx, env["sdpa_backend"] = sdpa_backend(plan)
    with ctx:
        for n, (length, max_b) in enumerate(plan.kv_lens):
            stack.set_cache(max_b, length)
            for B in plan.graph_sizes:
                if B > max_b:
                    continue
                if past(plan, t_start, "graph"):
                    return
                def step(x=x_all[:B]):
                    return stack.forward(x)

                d, wl = tm.time(step)
                enq = tm.enqueue(step)
                gd, gw = tm.graph(step)
                rows.add(kv_len=length, batch=B, captured=int(B in captured), padded_to=padded(B, captured),
                         eager_dev_us=d, eager_wall_us=wl, eager_enqueue_us=enq, graph_us=gd, graph_wall_us=gw)
                print(f"graph L={length} B={B}: eager {d:.0f} us, graph {gd:.0f} us, enqueue {enq:.0f} us")
            if n == 0:
                measure_loop(plan, out, stack, x_all, length, t_start)
        # last, so that the profiler cannot touch the timings above
        env["layers"] = plan.layers
        env["kernels_per_step_eager_b1"] = count_kernels(lambda: stack.forward(x_all[:1]), plan.device)
    stack.kc, stack.vc, stack.layers = [], [], []


def measure_loop(plan: Plan, out: Path, stack: Stack, x_all, length: int, t_start: float) -> None:
    """A synchronous loop step: inputs H2D, graph replay, lm_head, greedy sample, tokens D2H, bookkeeping.

    Its step time beside graph + lm_head/greedy measured alone shows whether the host work adds."""
    gen = torch.Generator(device=plan.device).manual_seed(3)
    V = 128256 if plan.device == "cuda" else 1000
    lm = torch.empty(V, plan.hidden, device=plan.device, dtype=stack.dt).normal_(0, plan.hidden ** -0.5,
                                                                                generator=gen)
    rows = Rows(out / "loop.csv", ["kv_len", "batch", "step_wall_us", "inputs_us", "launch_us",
                                   "sync_tolist_us", "bookkeeping_us", "graph_us", "lm_head_greedy_us"])
    tm = Timer(plan.device, plan.warmup, plan.reps)
    for B in plan.loop_sizes:
        if past(plan, t_start, "loop"):
            return
        x = x_all[:B]
        if plan.device == "cuda":
            g, hid = capture(lambda x=x: stack.forward(x))
            model = g.replay
        else:
            g, hid = None, stack.forward(x)

            def model(x=x, hid=hid):
                return hid.copy_(stack.forward(x))
        eng = HostLoop(B, plan.device)
        ph: dict[str, list[float]] = {"inputs": [], "launch": [], "sync": [], "book": [], "step": []}
        for it in range(plan.warmup + 30):
            t0 = time.perf_counter()
            eng.build_inputs()
            eng.copy_inputs()
            t1 = time.perf_counter()
            model()
            ids = F.linear(hid, lm).float().argmax(dim=-1)
            t2 = time.perf_counter()
            toks = ids.tolist()
            t3 = time.perf_counter()
            eng.bookkeeping(toks)
            t4 = time.perf_counter()
            if it >= plan.warmup:
                for k, v in zip(ph, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                    ph[k].append(v * 1e6)
        gd, _ = tm.time(model)
        ld, _ = tm.time(lambda hid=hid: F.linear(hid, lm).float().argmax(dim=-1))
        med = {k: statistics.median(v) for k, v in ph.items()}
        rows.add(kv_len=length, batch=B, step_wall_us=med["step"], inputs_us=med["inputs"], launch_us=med["launch"],
                 sync_tolist_us=med["sync"], bookkeeping_us=med["book"], graph_us=gd, lm_head_greedy_us=ld)
        print(f"loop B={B}: step {med['step']:.0f} us (graph {gd:.0f} + lm_head/greedy {ld:.0f})")
        del g


# ---------------------------------------------------------------- 3. host step loop


class Request:
    """The per-request state a scheduler keeps: its tokens, counts and stop conditions."""

    __slots__ = ("rid", "output", "num_computed", "max_tokens", "eos", "stop_ids", "blocks")

    def __init__(self, rid: int, prompt_len: int, blocks: list[int]):
        self.rid, self.output, self.num_computed = rid, [], prompt_len
        self.max_tokens, self.eos, self.stop_ids, self.blocks = 1 << 30, -1, frozenset((-2, -3)), blocks


@dataclass
class Output:
    """One sequence's result of a step (what an engine hands to its front end)."""

    rid: int
    new_token_ids: list[int]
    finish_reason: str | None


class HostLoop:
    """The CPU side of a step, a stand-in for an engine's loop: inputs written into persistent pinned
    buffers through numpy views (block-table rows grow by one entry when a sequence crosses a block),
    non-blocking copies to the GPU, and per-sequence bookkeeping on the sampled tokens."""

    BLOCK, MAX_BLOCKS = 16, 256

    def __init__(self, B: int, device: str, prompt_len: int = 512):
        pin = device == "cuda"
        nb = prompt_len // self.BLOCK + 1
        self.reqs = [Request(i, prompt_len, list(range(i * self.MAX_BLOCKS, i * self.MAX_BLOCKS + nb)))
                     for i in range(B)]
        self.cpu = {n: torch.zeros(B, dtype=torch.int64, pin_memory=pin) for n in ("ids", "pos", "slot")}
        self.cpu["bt"] = torch.zeros(B, self.MAX_BLOCKS, dtype=torch.int32, pin_memory=pin)
        self.np = {n: t.numpy() for n, t in self.cpu.items()}
        for i, r in enumerate(self.reqs):
            self.np["bt"][i, :nb] = r.blocks
        self.gpu = {n: torch.empty_like(t, device=device) for n, t in self.cpu.items()}
        self.last = [1] * B

    def build_inputs(self) -> None:
        ids, pos, slot, bt = self.np["ids"], self.np["pos"], self.np["slot"], self.np["bt"]
        for i, r in enumerate(self.reqs):
            p = r.num_computed
            ids[i] = self.last[i]
            pos[i] = p
            blk = p // self.BLOCK
            if blk >= len(r.blocks):
                r.blocks.append(r.blocks[-1] + 1)
                bt[i, blk % self.MAX_BLOCKS] = r.blocks[-1]
            slot[i] = r.blocks[blk] * self.BLOCK + p % self.BLOCK

    def copy_inputs(self) -> None:
        for n, t in self.cpu.items():
            self.gpu[n].copy_(t, non_blocking=True)

    def bookkeeping(self, toks: list[int]) -> list[Output]:
        outs = []
        for r, t in zip(self.reqs, toks):
            r.output.append(t)
            r.num_computed += 1
            reason = None
            if t == r.eos or t in r.stop_ids:
                reason = "stop"
            elif len(r.output) >= r.max_tokens:
                reason = "length"
            outs.append(Output(r.rid, [t], reason))
        self.last = toks
        return outs


def measure_host(plan: Plan, out: Path, t_start: float) -> None:
    rows = Rows(out / "host.csv", ["batch", "phase", "us"])
    gen = torch.Generator(device=plan.device).manual_seed(4)
    for B in plan.host_batches:
        if past(plan, t_start, "host"):
            return
        eng = HostLoop(B, plan.device)
        sampled = torch.randint(0, 32000, (B,), device=plan.device, generator=gen)
        ph = {"build_inputs": [], "copy_inputs": [], "sync_tolist": [], "bookkeeping": [], "step_total": []}
        for it in range(20 + plan.host_steps):
            if plan.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            eng.build_inputs()
            t1 = time.perf_counter()
            eng.copy_inputs()
            t2 = time.perf_counter()
            toks = sampled.tolist()
            t3 = time.perf_counter()
            eng.bookkeeping(toks)
            t4 = time.perf_counter()
            if it >= 20:
                for k, v in zip(ph, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                    ph[k].append(v * 1e6)
        for k, v in ph.items():
            rows.add(batch=B, phase=k, us=statistics.median(v))
        print(f"host B={B}: step {statistics.median(ph['step_total']):.1f} us")


# ---------------------------------------------------------------- environment and main


def environment(plan: Plan) -> dict:
    env = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": platform.python_version(),
           "torch": torch.__version__, "cuda": torch.version.cuda, "numpy": np.__version__,
           "platform": platform.platform(), "cpu_count": os.cpu_count(), "plan": plan.__dict__,
           "vllm_capture_sizes_max_num_seqs_256": vllm_capture_sizes(256)}
    try:
        env["cpu_model"] = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                                if ln.startswith("model name"))
    except (OSError, StopIteration):
        env["cpu_model"] = platform.processor()
    if plan.device == "cuda":
        prop = torch.cuda.get_device_properties(0)
        env.update(gpu=prop.name, sm_count=prop.multi_processor_count, gpu_mem_gib=round(prop.total_memory / 2**30, 1),
                   cudnn=torch.backends.cudnn.version())
        q = ("name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,"
             "temperature.gpu,persistence_mode,compute_mode")
        try:
            env["nvidia_smi"] = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True,
                                               text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            env["nvidia_smi"] = f"unavailable: {e}"
    return env


def write_env(out: Path, env: dict) -> None:
    (out / "env.json").write_text(json.dumps(env, indent=1, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks the script, measures nothing")
    ap.add_argument("--deadline-s", type=float, default=400.0, help="stop starting new sizes after this many seconds")
    ap.add_argument("--only", default="sampling,graph,host", help="comma list of sections to run")
    a = ap.parse_args(argv)
    plan = make_plan(a.smoke, a.deadline_s)
    if plan.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    env = environment(plan)
    write_env(a.out, env)
    t0 = time.perf_counter()
    sections = a.only.split(",")
    with torch.inference_mode():
        if "graph" in sections:
            measure_graph(plan, a.out, t0, env)
            write_env(a.out, env)
            gc.collect()
            if plan.device == "cuda":
                torch.cuda.empty_cache()
        if "sampling" in sections:
            measure_sampling(plan, a.out, t0)
    if "host" in sections:
        measure_host(plan, a.out, t0)
    if plan.device == "cuda":
        env["nvidia_smi_after"] = environment(plan).get("nvidia_smi")
    env["elapsed_s"] = round(time.perf_counter() - t0, 1)
    write_env(a.out, env)
    print(f"done in {env['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
