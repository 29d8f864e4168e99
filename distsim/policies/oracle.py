"""The oracle: a clairvoyant greedy heuristic, a reference router that shows what knowing more buys.

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
the CPU KV tier, requests still in dispatch, windowed prefill batching. So it is a greedy, myopic heuristic:
not an optimum and not a bound; built-ins beat it on some scenarios (P/D, stale signals). What no policy can
beat is distsim.regret.bound (a per-request lower bound on TTFT and E2E).

Its cost: each decision runs two shadows per candidate, each as long as the engine's work lasts, so on
long outputs (thousands of tokens: every running request outlives many decisions) or a deep queue it grows
with the work held. ``horizon_s`` cuts each shadow at that much simulated time and goes on in closed form, every later step as
long as the mean step so far (``_Shadow.stop``), so a decision costs at most the steps of the horizon; an
exact tie goes to the candidate with the fewest tokens left at the horizon.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from distsim.instance.latency.base import StepShape
from distsim.instance.outlook import outlook, prefix_hit
from distsim.policies.base import ROUTERS, PolicyParams, Router
from distsim.policies.choice import pick_min
from distsim.validators import choice, number

OBJECTIVES = ("marginal", "e2e", "ttft")


@dataclass(frozen=True)
class OracleParams(PolicyParams):
    objective: str | None = None  # marginal | e2e | ttft (null: marginal)
    horizon_s: float | None = None  # each shadow stops this much simulated time ahead (null: when its work ends)

    def check(self, key: str) -> None:
        if self.objective is not None:
            choice(f"{key}.objective", self.objective, OBJECTIVES)
        if self.horizon_s is not None:
            number(f"{key}.horizon_s", self.horizon_s, low=0.0, strict=True)


@ROUTERS.register("oracle")
class Oracle(Router):
    Params = OracleParams
    clairvoyant = True  # reads true output lengths and engine state: a reference, not a deployable policy

    def __init__(self, params: OracleParams, ctx):
        super().__init__(params, ctx)
        self.objective = params.objective or "marginal"
        self.horizon_us = None if params.horizon_s is None else max(1, int(round(params.horizon_s * 1e6)))
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
        model, budget, seqs, horizon = inst.latency, inst.max_tokens, inst.max_seqs, self.horizon_us
        s = run_shadow([*jobs, mine], model, budget, seqs, horizon)
        tie = s.backlog / (s.backlog + 1.0)  # < 1 us: orders only exact ties (times are whole microseconds)
        if self.objective == "ttft":
            return s.first[-1] + tie
        if self.objective == "e2e":
            return s.done[-1] + tie
        before = run_shadow(jobs, model, budget, seqs, horizon)
        return sum(s.done) - sum(before.done) + tie


def shadow(
    jobs: list[tuple[int, int, int]], model, budget: int, max_seqs: int, horizon_us: int | None = None
) -> tuple[list[int], list[int]]:
    """Each job's first-token and last-token time (microseconds from now) when an engine with step-time
    ``model`` serves ``jobs`` (prompt tokens to compute, tokens to generate, KV tokens computed) in order,
    nothing else arriving. A job with no prompt left is decoding (its first token is out: time 0). With
    ``horizon_us``, times past it are extrapolated (``_Shadow.stop``)."""
    s = run_shadow(jobs, model, budget, max_seqs, horizon_us)
    return s.first, s.done


def run_shadow(jobs: list[tuple[int, int, int]], model, budget: int, max_seqs: int, horizon_us: int | None) -> _Shadow:
    """The shadow (see :func:`shadow`), run to the end of its work or to ``horizon_us``."""
    s = _Shadow(jobs)
    end = horizon_us if horizon_us is not None else -1
    while s.decoders or s.prefilling or s.waiting < len(jobs):
        if s.t >= end >= 0:
            s.stop(budget, max_seqs)
            break
        s.admit(max_seqs)
        room = budget - len(s.decoders)
        if s.prefilling and room > 0:
            s.prefill_step(room, model)
        else:  # decode only, up to the earliest finish (or the step that crosses the horizon)
            k = s.decoders[0][0] - s.steps
            steps = model.decode_steps_us(len(s.decoders), s.ctx_sum, k)
            if end >= 0:
                ends = np.cumsum(steps)
                k = min(k, int(np.searchsorted(ends, end - s.t)) + 1)
                s.t += int(ends[k - 1])
            else:
                s.t += int(steps.sum())
            s.ctx_sum += len(s.decoders) * k
            s.steps += k
        s.finish()
    return s


class _Shadow:
    """The shadow's state. Decoders are aggregates, as the engine keeps them (distsim/instance/decode_set.py):
    a heap of (the step count at which each finishes, job, context and step count when it joined) and the
    summed context, so a decode-only stretch is one step-time call."""

    def __init__(self, jobs: list[tuple[int, int, int]]):
        self.jobs = jobs
        self.todo = [j[0] for j in jobs]
        self.left = [j[1] for j in jobs]
        self.ctx = [j[2] for j in jobs]
        self.first = [0 if n == 0 else -1 for n in self.todo]
        self.done = [0] * len(jobs)
        self.decoders: list[tuple[int, int, int, int]] = []
        self.prefilling: list[int] = []
        self.waiting = 0  # the next job not yet admitted
        self.t = self.steps = self.ctx_sum = 0
        self.backlog = 0  # tokens left to serve when stopped at a horizon (0: the work ran out)

    def stop(self, budget: int, max_seqs: int) -> None:
        """Cut at the horizon and go on in closed form, every step as long as the mean step so far: a
        running request ends after the steps it has left; a prompt being computed takes its chunks of
        ``budget`` tokens, then its output; a waiting request starts when a running one ends (at most
        ``max_seqs`` at once, in order). ``backlog`` counts the tokens left in all."""
        step = self.t / max(self.steps, 1)
        ends = [self.t + (fin - self.steps) * step for fin, _, _, _ in self.decoders]
        for fin, i, _, _ in self.decoders:
            self.done[i] = int(self.t + (fin - self.steps) * step)
            self.backlog += fin - self.steps
        queue = [*self.prefilling, *range(self.waiting, len(self.jobs))]
        heapq.heapify(ends)
        for i in queue:
            start = heapq.heappop(ends) if len(ends) >= max_seqs else float(self.t)
            first = start + -(-self.todo[i] // budget) * step
            if self.first[i] < 0:
                self.first[i] = int(first)
            end = first + max(self.left[i] - 1, 0) * step
            self.done[i] = int(end)
            self.backlog += self.todo[i] + self.left[i]
            heapq.heappush(ends, end)

    def admit(self, max_seqs: int) -> None:
        while self.waiting < len(self.jobs) and len(self.decoders) + len(self.prefilling) < max_seqs:
            i = self.waiting
            self.waiting += 1
            if self.todo[i]:
                self.prefilling.append(i)
            else:
                self.join(i)

    def join(self, i: int) -> None:
        heapq.heappush(self.decoders, (self.steps + self.left[i], i, self.ctx[i], self.steps))
        self.ctx_sum += self.ctx[i]

    def finish(self) -> None:
        """Decoders whose last token came out by now leave."""
        heap = self.decoders
        while heap and heap[0][0] <= self.steps:
            _, i, ctx, joined = heapq.heappop(heap)
            self.ctx_sum -= ctx + self.steps - joined
            self.done[i] = self.t

    def prefill_step(self, room: int, model) -> None:
        """One step: every decoder's token, then prefill chunks in admission order within ``room`` tokens."""
        todo, ctx = self.todo, self.ctx
        tokens = pairs = kv = 0
        chunked = []
        for i in self.prefilling:
            if room <= 0:
                break
            n = min(todo[i], room)
            room -= n
            tokens += n
            pairs += n * ctx[i] + n * (n + 1) // 2
            kv += ctx[i] + n
            chunked.append(i)
            todo[i] -= n
            ctx[i] += n
        self.t += model.step_us(StepShape(tokens, pairs, kv, len(self.decoders), self.ctx_sum, len(chunked)))
        self.ctx_sum += len(self.decoders)
        self.steps += 1
        for i in chunked:
            if todo[i] == 0:  # the step that ends a prompt emits its first token
                self.first[i] = self.t
                self.left[i] -= 1
                self.ctx[i] += 1
                self.prefilling.remove(i)
                if self.left[i] <= 0:
                    self.done[i] = self.t
                else:
                    self.join(i)
