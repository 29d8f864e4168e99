"""Where the memory of a large run goes: ``python scripts/bench_scale.py memory``.

Each figure comes from a fresh child process (scripts/bench_scale.py --child):

* bytes per idle instance: the Python heap (tracemalloc) of a built fleet of 2N instances less that of N;
* bytes per request as the workload makes it (the Request, its block keys), traced over 20,000 requests,
  and per recorded request (the recorder's columns at the end of the run);
* bytes per cached block: the prefix caches' nodes, their key runs and child dicts, walked at the end of the
  events, over the blocks they hold (referenced or evictable);
* the whole process's resident memory by phase (build, events, measure: sampled every 50 ms) and its peak.

The cases are the headline's (the `large` cluster, 1,000 x Llama-3.1-70B TP4, default workload at 10 requests
per second per instance, round robin) and a cells fleet (conf/cluster/cells_large.yaml, least loaded in
each cell, 4 requests per second per instance, shared prompts on), both with sim.write_requests=false.
"""

from __future__ import annotations

import gc
import resource
import sys
import threading
import time
import tracemalloc
from itertools import islice

IDLE_REQUESTS = 10  # an idle fleet's workload (never run)
SAMPLE_REQUESTS = 20_000  # requests traced as made


def headline_overrides(instances: int, requests: int, policy: str = "round_robin") -> list[str]:
    return [
        "cluster=large", f"cluster.instances={instances}", f"policy={policy}", "signals=fresh",
        f"workload.num_requests={requests}", f"workload.arrival.rate_rps={10.0 * instances}",
        "sim.write_requests=false", "seed=0",
    ]  # fmt: skip


def cells_overrides(cells: int, requests: int) -> list[str]:
    instances = cells * 1024
    return [
        "cluster=cells_large", f"cluster.instances={instances}", f"cluster.cells.count={cells}",
        "policy=least_loaded", "signals=fresh", f"workload.num_requests={requests}",
        f"workload.arrival.rate_rps={4.0 * instances}", "sim.write_requests=false", "seed=0",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------- child
def child(spec: dict) -> dict:
    kind = spec["memory"]
    if kind == "idle":
        return idle_bytes(spec["small"], spec["large"], spec["instances"])
    if kind == "generated":
        return generated_bytes(spec["overrides"])
    return run_by_phase(spec["overrides"])


class _Built(Exception):
    """Raised by the probe once the world is built: the run goes no further."""


def _built_heap(overrides: list[str]) -> int:
    """Bytes the Python heap grows by while the world of ``overrides`` is built (nothing run); what the run
    makes before the world (the loop, the recorder) is the same for any fleet, so a difference cancels it."""
    from distsim import load_config
    from distsim.probe import RunProbe
    from distsim.resolve import resolve
    from distsim.simulate import run

    grown: list[int] = []

    class Weigh(RunProbe):
        def built(self, world, loop, recorder) -> None:
            gc.collect()
            grown.append(tracemalloc.get_traced_memory()[0] - before)
            raise _Built

    scenario = resolve(load_config(overrides))
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    try:
        run(scenario, probe=Weigh())
    except _Built:
        pass
    return grown[0]


def idle_bytes(small: list[str], large: list[str], instances: int) -> dict:
    """Bytes per instance: a fleet of 2N less a fleet of N, over N."""
    tracemalloc.start()
    a = _built_heap(small)
    gc.collect()
    b = _built_heap(large)
    return {"per_instance": round((b - a) / instances), "fleet_mb": round(b / 1e6, 1)}


def generated_bytes(overrides: list[str]) -> dict:
    """Bytes per request as the configured workload makes it (the Request and its block keys)."""
    from distsim import load_config
    from distsim.resolve import resolve

    scenario = resolve(load_config(overrides))
    source = iter(scenario.workload)
    next(source)  # the generator's own first block of draws, before tracing
    tracemalloc.start()
    made = list(islice(source, SAMPLE_REQUESTS))
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    keys = sum(len(r.block_hashes) for r in made if r.block_hashes is not None)
    return {"per_request": round(traced / len(made)), "keys_per_request": round(keys / len(made), 1)}


def cache_bytes(instances) -> tuple[int, int, int]:
    """(bytes, cached blocks, nodes) of the instances' prefix caches: nodes, key runs, child dicts."""
    from distsim.instance.kv_cache import _LEAF

    size = sys.getsizeof
    total = blocks = nodes = 0
    seen: set[int] = set()
    for inst in instances:
        kv = inst.kv
        blocks += kv.referenced + kv.evictable
        stack = [kv.root]
        while stack:
            node = stack.pop()
            nodes += 1
            total += size(node)
            if id(node.src) not in seen:
                seen.add(id(node.src))
                total += size(node.src)
                if isinstance(node.src, tuple):
                    total += sum(size(k) for k in node.src)
            if node.children is not _LEAF:
                total += size(node.children)
                stack.extend(node.children.values())
    return total, blocks, nodes - len(instances)  # roots are no cached runs


def recorder_bytes(recorder) -> int:
    """The recorder's columns, and its records as tuples with the int and float objects they hold (an
    older recorder keeps only those)."""
    chunks = sum(a.nbytes + 112 for part in getattr(recorder, "packed", ()) for a in part.values())
    size = sys.getsizeof
    own = (int, float)
    return chunks + sum(size(r) + sum(size(v) for v in r if type(v) in own and not -5 <= v <= 256) for r in recorder.records)


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        return int(next(line for line in fh if line.startswith("VmRSS:")).split()[1]) / 1024


def run_by_phase(overrides: list[str]) -> dict:  # long: one run, instrumented phase by phase
    """The run of ``overrides`` with its resident memory sampled by phase, and the caches and the recorder
    measured at the end of the events."""
    from distsim import load_config, simulate
    from distsim.probe import RunProbe

    phase, peaks, out = ["build"], {}, {}

    def sample() -> None:
        while True:
            peaks[phase[0]] = max(peaks.get(phase[0], 0.0), _rss_mb())
            time.sleep(0.05)

    class Phases(RunProbe):
        def built(self, world, loop, recorder) -> None:
            phase[0] = "events"

        def ran(self, world, loop, recorder) -> None:
            phase[0] = "measure"
            out["cache_bytes"], out["cached_blocks"], out["nodes"] = cache_bytes(world.instances)
            out["recorded"] = len(recorder) if hasattr(type(recorder), "__len__") else len(recorder.records)
            out["recorder_bytes"] = recorder_bytes(recorder)
            out["rss_end_of_events_mb"] = round(_rss_mb())

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.process_time()
    result = simulate(load_config(overrides), probe=Phases())
    phase[0] = "end"
    time.sleep(0.1)
    out.update({f"rss_{k}_mb": round(v) for k, v in peaks.items() if k != "end"})
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["cpu_s"] = round(time.process_time() - t0, 1)
    out["completed"] = result.summary["requests"]["completed"]
    return out


# ---------------------------------------------------------------------------------------- tables
def tables(requests: int, cells: int, cells_requests: int) -> list[str]:
    """The memory figures of the headline case and a cells case."""
    from bench_scale import spawn

    lines = ["bytes per idle instance (heap of a fleet of 2N less one of N, over N)"]
    for name, make, n in (("large", lambda k: headline_overrides(k, IDLE_REQUESTS), 1000),
                          ("cells_large", lambda k: cells_overrides(k // 1024, IDLE_REQUESTS), 8192)):
        r = spawn({"memory": "idle", "small": make(n), "large": make(2 * n), "instances": n}, "idle", n)
        lines.append(f"  {name:<12} N={n:<7,} {r['per_instance']:>7,} B   (fleet of {2 * n:,}: {r['fleet_mb']} MB)")
        print(lines[-1], flush=True)
    r = spawn({"memory": "generated", "overrides": headline_overrides(1000, requests)}, "generated", 1000)
    lines.append(f"bytes per request as made (default workload): {r['per_request']:,} B "
                 f"({r['keys_per_request']} block keys each)")
    print(lines[-1], flush=True)
    for title, ovr, n in ((f"headline: 1,000 instances x {requests:,} requests, round robin",
                           headline_overrides(1000, requests), 1000),
                          (f"cells: {cells * 1024:,} instances x {cells_requests:,} requests, shared prompts",
                           cells_overrides(cells, cells_requests), cells * 1024)):
        r = spawn({"memory": "run", "overrides": ovr}, title, n)
        lines.append(title)
        lines.append(f"  cached blocks {r['cached_blocks']:,} in {r['nodes']:,} nodes: "
                     f"{r['cache_bytes'] / max(r['cached_blocks'], 1):.1f} B a block ({r['cache_bytes'] / 1e6:.0f} MB); "
                     f"recorder {r['recorder_bytes'] / max(r['recorded'], 1):.0f} B a request")
        phases = "  ".join(f"{k[4:-3]} {v:,}" for k, v in r.items() if k.startswith("rss_") and k != "rss_end_of_events_mb")
        lines.append(f"  RSS MB by phase: {phases}; end of events {r['rss_end_of_events_mb']:,}; "
                     f"peak {r['peak_rss_mb']:,}   ({r['cpu_s']} CPU-s, {r['completed']:,} completed)")
        print("\n".join(lines[-3:]), flush=True)
    return lines
