"""Micro-benchmark of the router's prefix index on the default workload's hash streams.

The prompts of the default workload (80% open with one of 400 shared 2,048-token prompts) at the `large`
cluster's block size, routed over ``--instances`` instances: each request is matched against the index,
sent to its best-matching instance (70% of the time when one matches, else round robin, so prefixes
spread as under a load guard) and recorded there. Times the index's ``record`` and ``match`` alone; with
``--memory``, the index's own Python heap (tracemalloc) and its size in keys and nodes.

    python scripts/bench_prefix_index.py                       # distsim's index (by segments)
    python scripts/bench_prefix_index.py --reference           # the per-key index kept in tests/prefixref.py
    python scripts/bench_prefix_index.py --instances 1000 --requests 100000 --memory
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KV_BLOCKS = 28_789  # the large cluster's KV blocks per instance (Llama-3.1-70B TP4 on H100)
STRIDE = 4  # 64-token chunks of 16-token blocks


def prompts(requests: int) -> list[tuple]:
    """The block keys of the default workload's first ``requests`` prompts (block size 16), of those that
    have any: a prompt without a shared prefix carries none and the router neither matches nor records it."""
    from distsim import load_config
    from distsim.workload.source import build_workload

    cfg = load_config(["cluster=large", f"workload.num_requests={requests}", "seed=0"])
    return [r.block_hashes for r in build_workload(cfg.workload, seed=0, block_size=16) if r.block_hashes]


def index_class(reference: bool):
    if reference:
        sys.path.insert(0, str(ROOT / "tests"))
        from prefixref import PrefixIndex
    else:
        from distsim.signals.prefix_index import PrefixIndex
    return PrefixIndex


def drive(index, streams: list[tuple], instances: int) -> tuple[float, float]:
    """Match then record every prompt; returns the seconds spent in match and in record."""
    rng = random.Random(0)
    clock = time.process_time  # CPU time: the machine may be shared
    t_match = t_record = 0.0
    rr = 0
    for hashes in streams:
        t0 = clock()
        match = index.match(hashes)
        t1 = clock()
        best = int(match.argmax())
        if match[best] > 0 and rng.random() < 0.7:
            target = best
        else:
            target, rr = rr, (rr + 1) % instances
        t2 = clock()
        index.record(target, hashes)
        t_record += clock() - t2
        t_match += t1 - t0
    return t_match, t_record


def size(index) -> str:
    if hasattr(index, "owners"):  # the per-key reference
        return f"{len(index.owners):,} distinct keys, {sum(len(lru) for lru in index.lru):,} held"
    return f"{index.tree.nodes:,} nodes, {sum(index.size):,} keys held"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--capacity-blocks", type=int, default=KV_BLOCKS)
    ap.add_argument("--reference", action="store_true", help="the per-key index of tests/prefixref.py")
    ap.add_argument("--memory", action="store_true", help="trace the index's heap (slower)")
    args = ap.parse_args()
    streams = prompts(args.requests)
    cls = index_class(args.reference)
    if args.memory:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if args.memory else 0
    index = cls(args.instances, [args.capacity_blocks] * args.instances, STRIDE)
    t0 = time.process_time()
    t_match, t_record = drive(index, streams, args.instances)
    cpu = time.process_time() - t0
    n = len(streams)
    name = "per-key reference" if args.reference else "segments"
    blocks = args.capacity_blocks
    print(f"{name}: {args.instances} instances x {n:,} requests, {blocks} blocks each, stride {STRIDE}")
    print(f"  match  {t_match:7.2f} s  {t_match / n * 1e6:7.1f} us/call")
    print(f"  record {t_record:7.2f} s  {t_record / n * 1e6:7.1f} us/call")
    print(f"  whole loop {cpu:.2f} CPU-s; {size(index)}")
    if args.memory:
        now, peak = tracemalloc.get_traced_memory()
        print(f"  index heap {(now - before) / 2**20:.1f} MB (traced peak {(peak - before) / 2**20:.1f} MB)")
    keys = sum(len(h) // STRIDE for h in streams)
    last = int(np.sum(index.match(streams[-1])))  # the same with either index
    print(f"  keys recorded {keys:,} ({keys / n:.1f} per request); last prompt's match summed {last}")


if __name__ == "__main__":
    main()
