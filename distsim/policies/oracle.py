"""The oracle: a clairvoyant reference router, to show how far a deployable policy is from one that knows.

It is not deployable, and says so (``clairvoyant``): it reads what no real router can, the true output
length of every request (INV-9 forbids that to every other policy) and each engine's exact state at the
decision (distsim.instance.outlook: every request's prompt tokens still to compute and tokens still to
generate, the prefix cache's hit for each prompt), whatever the signals config says. For each candidate it
predicts, with the engine's own step-time model, how the engine would serve what it holds plus this request
if nothing else arrived (a shadow of continuous batching: running requests first, then the queue, first
come first served, up to max_num_seqs; each step decodes every decoder and fills max_num_batched_tokens
with prefill chunks in order; decode-only stretches in one go), and picks the smallest ``objective``:

- ``marginal`` (default): the increase of the summed completion times of every request on the engine that
  sending this one there causes (its own latency plus the delay it adds to the others);
- ``e2e``: the request's own predicted completion; ``ttft``: its own predicted first token.

What it does not foresee: later arrivals (they join the same batches), KV-cache pressure (preemptions) and
the CPU KV tier, requests still in dispatch, windowed prefill batching. So it is greedy and myopic: a strong
reference, not an optimum, and a policy may beat it on some run. The bound that no policy can beat is
distsim.regret.bound (a per-request lower bound on TTFT and E2E).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distsim.instance.latency.base import StepShape
from distsim.instance.outlook import outlook, prefix_hit
from distsim.policies.base import ROUTERS, PolicyParams, Router
from distsim.policies.choice import pick_min
from distsim.validators import choice

OBJECTIVES = ("marginal", "e2e", "ttft")


@dataclass(frozen=True)
class OracleParams(PolicyParams):
    objective: str | None = None  # marginal | e2e | ttft (null: marginal)

    def check(self, key: str) -> None:
        if self.objective is not None:
            choice(f"{key}.objective", self.objective, OBJECTIVES)


@ROUTERS.register("oracle")
class Oracle(Router):
    Params = OracleParams
    clairvoyant = True  # reads true output lengths and engine state: a reference, not a deployable policy

    def __init__(self, params: OracleParams, ctx):
        super().__init__(params, ctx)
        self.objective = params.objective or "marginal"
        self.sent: dict[int, list] = {}  # engine number -> requests routed there, maybe still on their way

    def route(self, req, view) -> int:
        now = view.now
        engines = view.clairvoyant_engines()
        costs = np.array([self._cost(inst, req, now) for inst in engines], dtype=np.float64)
        self.last_scores = -costs
        pick = pick_min(costs, self.ctx.rng)
        self.sent.setdefault(engines[pick].index, []).append(req)
        return pick

    def _on_the_way(self, inst) -> list:
        """Requests this router sent to ``inst`` that have not reached it yet (the dispatch and ingest delay)."""
        on_the_way = [r for r in self.sent.get(inst.index, ()) if r.seq is None and r.first_token_us < 0]
        self.sent[inst.index] = on_the_way
        return on_the_way

    def _cost(self, inst, req, now: int) -> float:
        jobs = outlook(inst, now)
        for other in (*self._on_the_way(inst), req):
            hit = prefix_hit(inst, other)
            jobs.append((other.prompt_tokens - hit, other.output_tokens, hit))
        mine = jobs.pop()
        first, done = shadow([*jobs, mine], inst.latency, inst.max_tokens, inst.max_seqs)
        if self.objective == "ttft":
            return first[-1]
        if self.objective == "e2e":
            return done[-1]
        _, before = shadow(jobs, inst.latency, inst.max_tokens, inst.max_seqs)
        return sum(done) - sum(before)


def shadow(jobs: list[tuple[int, int, int]], model, budget: int, max_seqs: int) -> tuple[list[int], list[int]]:
    """Each job's first-token and last-token time (microseconds from now) when an engine with step-time
    ``model`` serves ``jobs`` (prompt tokens to compute, tokens to generate, KV tokens computed) in order,
    nothing else arriving. A job with no prompt left is decoding (its first token is out: time 0)."""
    todo = [j[0] for j in jobs]
    left = [j[1] for j in jobs]
    ctx = [j[2] for j in jobs]
    first = [0 if n == 0 else -1 for n in todo]
    done = [0] * len(jobs)
    active: list[int] = []
    waiting = 0  # the next job not yet admitted
    t = 0
    while active or waiting < len(jobs):
        while waiting < len(jobs) and len(active) < max_seqs:
            active.append(waiting)
            waiting += 1
        dec = [i for i in active if todo[i] == 0]
        room = budget - len(dec)
        if room > 0 and len(dec) < len(active):
            t += _prefill_step(active, dec, todo, left, ctx, first, room, model, t)
        else:  # decode only, up to the earliest finish
            k = min(left[i] for i in dec)
            t += int(model.decode_steps_us(len(dec), sum(ctx[i] for i in dec), k).sum())
            for i in dec:
                left[i] -= k
                ctx[i] += k
        for i in active:
            if left[i] <= 0 and todo[i] == 0:
                done[i] = t
        active = [i for i in active if not (left[i] <= 0 and todo[i] == 0)]
    return first, done


def _prefill_step(active, dec, todo, left, ctx, first, room: int, model, t: int) -> int:
    """One step from ``t``: every decoder's token, then prefill chunks in order within ``room`` tokens; its
    duration."""
    decode_ctx = sum(ctx[i] for i in dec)
    tokens = pairs = kv = seqs = 0
    finished = []
    for i in active:
        if todo[i] == 0 or room <= 0:
            continue
        n = min(todo[i], room)
        room -= n
        tokens += n
        pairs += n * ctx[i] + n * (n + 1) // 2
        kv += ctx[i] + n
        seqs += 1
        todo[i] -= n
        ctx[i] += n
        if todo[i] == 0:
            finished.append(i)
    dur = model.step_us(StepShape(tokens, pairs, kv, len(dec), decode_ctx, seqs))
    for i in dec:
        left[i] -= 1
        ctx[i] += 1
    for i in finished:  # the step that ends a prompt emits its first token
        left[i] -= 1
        first[i] = t + dur
    return dur
