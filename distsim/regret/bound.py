"""A per-request lower bound on TTFT and E2E that no routing policy can beat.

For each request, the fastest it could possibly be served: alone on an idle instance of the fastest pool,
with every prompt block that an earlier request could have put in a prefix cache already there. So:

    ttft >= ingest(prompt) + sum of the prefill steps of the uncached tokens, alone, in chunks of
            max_num_batched_tokens (one step without chunked prefill) + the per-token output lag
    e2e  >= ttft bound + (output - 1) decode-only steps of a batch of one, from a context of the prompt

where "uncached" is the prompt minus its longest block prefix that another request arriving strictly before
this one can reach its engine shares (block hashes are chained, so equal hashes mean equal content), capped
as vLLM caps hits (at least the prompt's last token is computed), and nothing when prefix caching is off;
the dispatch latency (the policy's) counts with the ingest. Each term is what the engine
must do for that request whatever else runs: a step holding other work is no shorter (step time grows
with every term of its shape), waiting is >= 0, a KV transfer (P/D) and the dispatch latency only add.
The bound takes the smallest over the pools.

Because every request's latency is at least its bound, every order statistic is too: the bound's mean,
p50, p90 and p99 over a set of requests are lower bounds of any policy's figures over the same set. It is
a floor, not a target: it ignores queueing, which at load no policy avoids. :func:`bound_summary` also
counts requests that beat their bound (0 unless the model has a term this module does not know of).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from distsim.instance.latency.base import StepShape
from distsim.request import Request

if TYPE_CHECKING:
    import pandas as pd

    from distsim.cluster.pools import PoolSpec
    from distsim.resolve import Scenario


def cacheable_blocks(requests: list[Request], ready_us: dict[int, int]) -> dict[int, int]:
    """Per request id, the leading prompt blocks that another request arriving strictly before the request
    can reach its engine (``ready_us``: arrival + front-end and dispatch delays) also has: only those can
    have been computed before it is there; any other block is computed after, in steps on its engine
    within its TTFT (by it or by another request on that engine)."""
    first: dict = {}  # block hash -> the two earliest (arrival, request id) holding it
    for req in requests:
        for h in req.block_hashes or ():
            held = first.get(h)
            entry = (req.arrival_us, req.request_id)
            if held is None:
                first[h] = (entry,)
            elif len(held) < 2 or entry < held[1]:
                first[h] = tuple(sorted((*held, entry)))[:2]
    out: dict[int, int] = {}
    for req in requests:
        ready = ready_us[req.request_id]
        k = 0
        for h in req.block_hashes or ():
            other = next(e for e in (*first[h], (ready, -1)) if e[1] != req.request_id)
            if other[0] >= ready:
                break
            k += 1
        out[req.request_id] = k
    return out


def _prefill_us(pool: PoolSpec, uncached: int, cached: int) -> int:
    """The prefill steps of ``uncached`` tokens after ``cached`` ones, alone, in budget-sized chunks."""
    budget = pool.engine.max_num_batched_tokens if pool.engine.enable_chunked_prefill else uncached
    total, done = 0, cached
    left = uncached
    while left > 0:
        n = min(left, max(budget, 1))
        total += pool.latency.step_us(StepShape(n, n * done + n * (n + 1) // 2, done + n, 0, 0, 1))
        done += n
        left -= n
    return total


def _bound_on(pool: PoolSpec, req: Request, blocks: int) -> tuple[int, int]:
    """(TTFT, E2E) lower bounds in microseconds on ``pool``, before the front end's costs."""
    prompt = req.prompt_tokens
    bs = pool.engine.block_size
    cached = min(blocks, (prompt - 1) // bs) * bs if pool.engine.enable_prefix_caching else 0
    ttft = _prefill_us(pool, prompt - cached, cached)
    steps = req.output_tokens - 1
    decode = int(pool.latency.decode_steps_us(1, prompt, steps).sum()) if steps > 0 else 0
    return ttft, ttft + decode


def latency_bounds(scenario: Scenario) -> pd.DataFrame:
    """Per request of the scenario's workload: request_id, ttft_bound_ms, e2e_bound_ms."""
    import pandas as pd

    requests = list(scenario.workload)
    front = scenario.frontend
    delay = {r.request_id: scenario.policy.dispatch_us + (front.ingest_us(r.prompt_tokens) if front.ingests else 0)
             for r in requests}
    blocks = cacheable_blocks(requests, {r.request_id: r.arrival_us + delay[r.request_id] for r in requests})
    lag = front.output_lag_us
    ids, ttft, e2e = [], [], []
    for req in requests:
        best = min(_bound_on(pool, req, blocks[req.request_id]) for pool in scenario.pools)
        ids.append(req.request_id)
        ttft.append(delay[req.request_id] + best[0] + lag)
        e2e.append(delay[req.request_id] + best[1] + lag)
    return pd.DataFrame({
        "request_id": np.asarray(ids, dtype=np.int64),
        "ttft_bound_ms": np.asarray(ttft, dtype=np.float64) / 1000.0,
        "e2e_bound_ms": np.asarray(e2e, dtype=np.float64) / 1000.0,
    })  # fmt: skip


def bound_summary(bounds: pd.DataFrame, requests: pd.DataFrame) -> dict[str, Any]:
    """The bound over the run's completed requests (mean, p50, p90, p99 of TTFT and E2E), beside the run's
    own figures over the same requests, and how many requests beat their bound (should be 0)."""
    done = requests[requests["status"].astype(str) == "completed"].merge(bounds, on="request_id")
    out: dict[str, Any] = {"requests": len(done)}
    for metric in ("ttft", "e2e"):
        got, floor = done[f"{metric}_ms"].to_numpy(), done[f"{metric}_bound_ms"].to_numpy()
        out[f"{metric}_ms"] = {
            "bound": _figures(floor), "run": _figures(got),
            "beat_their_bound": int((got < floor - 1e-9).sum()),
        }
    return out


def _figures(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    out = {"mean": float(values.mean())}
    out.update({f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 99)})
    return {k: round(v, 3) for k, v in out.items()}
