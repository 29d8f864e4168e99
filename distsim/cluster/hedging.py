"""Hedged requests: a request still without its first token after a delay gets a copy on another instance;
the first copy to answer (emit its first token) wins, and every other copy is cancelled at once.

This module keeps the books; the cluster routes and dispatches the copies and the instances cancel them
(:meth:`distsim.instance.instance.Instance.cancel`: a queued copy leaves at once, a running one at the end
of the step in flight, freeing its KV blocks). A copy is a :class:`Request` of its own with the workload
fields of the original and a negative id, so no instance or cluster table ever holds two entries under
one id. The request is recorded exactly once, under its own id, with the winning copy's times.

Work wasted is what the cancelled copies computed: prompt tokens (recomputes included) and generated
tokens, and the GPU-seconds those tokens cost on their instance, attributed by token share (each step's
time split equally among its tokens, summed by phase: see the metrics package's hedging module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distsim.cluster.settings import HedgeSettings
from distsim.errors import SimulationError
from distsim.request import Request, Status

# the runtime fields a winning copy hands to the request it stands for
RUNTIME_FIELDS = (
    "status", "instance", "prefill_instance", "route_us", "enqueue_us", "first_scheduled_us", "first_token_us", "completion_us",
    "last_token_us", "generated", "cached_tokens", "preemptions",
)  # fmt: skip


@dataclass(slots=True, eq=False)
class HedgeGroup:
    """A hedged request: its copies (index 0: the request itself), where each went, and the outcome."""

    copies: list[Request]
    targets: list[int]  # each copy's instance, in the cluster's numbering
    winner: int = -1  # the copy that answered first
    recorded: bool = False
    wasted_prefill: int = 0
    wasted_decode: int = 0
    gone: list[bool] = field(default_factory=list)  # per copy: it no longer holds anything
    waste: list[tuple[int, int, int]] = field(default_factory=list)  # cancelled copies' (instance, prefill, decode)

    @property
    def live(self) -> int:
        """Copies still served somewhere (not cancelled, refused or finished)."""
        return self.gone.count(False)


class HedgeTimers:
    """The owner of a cluster's hedge timer events (their handler is this object's method), so the cluster
    can drop the timers still pending once every request is recorded (else they would prolong the run)."""

    __slots__ = ("_handler",)

    def __init__(self, handler: Any):
        self._handler = handler  # the cluster's: it routes and dispatches copies

    def fire(self, now: int, item: Any) -> None:
        self._handler(now, item)


class Hedger:
    """The hedging books of one cluster (or cell): groups by copy id, counts, wasted work per instance."""

    def __init__(self, settings: HedgeSettings, default_ttft_slo_ms: float, base: int, rng: np.random.Generator):
        self.settings = settings
        self.default_ttft_slo_ms = default_ttft_slo_ms
        self.base = base  # global number of the cluster's first instance
        self.rng = rng  # target "random": its own stream ("hedge", a cell's "hedge/cell/<i>")
        self.by_id: dict[int, HedgeGroup] = {}  # every copy's id (the original's too) -> its group
        self.groups: dict[int, HedgeGroup] = {}  # original id -> group, kept for the request columns
        self._next_id = -1
        self.copies_sent = 0
        self.cancelled = 0  # copies cancelled because another answered first

    def delay_us(self, req: Request) -> int:
        """How long a copy waits for a first token before the next copy goes out."""
        settings = self.settings
        if settings.delay_us is not None:
            return settings.delay_us
        slo_ms = req.ttft_slo_ms if req.ttft_slo_ms is not None else self.default_ttft_slo_ms
        return int(round(settings.slo_fraction * slo_ms * 1000.0))

    def wants_copy(self, req: Request) -> bool:
        """Whether the hedge timer of ``req`` (the original) should send another copy now."""
        if req.first_token_us >= 0 or req.status != Status.UNFINISHED:
            return False
        group = self.by_id.get(req.request_id)
        if group is None:
            return True
        return group.winner < 0 and not group.recorded and len(group.copies) < self.settings.max_copies

    def taken(self, req: Request, first_target: int) -> list[int]:
        """The instances (cluster numbering) that already had a copy of ``req``; ``first_target``: its own."""
        group = self.by_id.get(req.request_id)
        return [first_target] if group is None else group.targets

    def target_of(self, copy: Request) -> int:
        """The instance (cluster numbering) a copy was sent to."""
        group = self.by_id[copy.request_id]
        return group.targets[group.copies.index(copy)]

    def new_copy(self, req: Request, first_target: int, target: int) -> Request:
        """A copy of the original ``req`` bound for ``target``; ``first_target``: the original's instance."""
        group = self.by_id.get(req.request_id)
        if group is None:
            group = HedgeGroup([req], [first_target], gone=[False])
            self.by_id[req.request_id] = self.groups[req.request_id] = group
        copy = Request(
            self._next_id, req.arrival_us, req.prompt_tokens, req.output_tokens, req.tenant, req.slo_class,
            req.session_id, req.block_hashes, req.ttft_slo_ms, req.tpot_slo_ms, req.priority,
        )  # fmt: skip
        self._next_id -= 1
        group.copies.append(copy)
        group.targets.append(target)
        group.gone.append(False)
        self.by_id[copy.request_id] = group
        self.copies_sent += 1
        return copy

    def first_token(self, req: Request) -> list[Request]:
        """``req`` emitted its first token: if it is the first copy of its group to do so, it wins; the
        live copies to cancel."""
        group = self.by_id.get(req.request_id)
        if group is None or group.winner >= 0:
            return []
        group.winner = group.copies.index(req)
        return [c for i, c in enumerate(group.copies) if i != group.winner and not group.gone[i]]

    def settle(self, req: Request, where: tuple[int, tuple[int, int]]) -> Request | None:
        """A copy reached a final status on its instance (``where``: that instance's global number and the
        copy's work there): the request to record (the original, carrying the winner's times), or None
        when another copy stands for it."""
        group = self.by_id.get(req.request_id)
        if group is None:
            return req
        i = group.copies.index(req)
        if group.recorded or (group.winner >= 0 and i != group.winner):
            self._leave(group, i, where)  # cancelled, it finished in its last step: its work is wasted
            return None
        self._leave(group, i, None)
        if req.status != Status.COMPLETED and group.live > 0:
            return None  # refused there (too long, never fits); another copy is still served
        return self._record(group, req)

    def _record(self, group: HedgeGroup, req: Request) -> Request:
        if group.recorded:
            raise SimulationError(f"hedging: request {group.copies[0].request_id} recorded twice")
        group.recorded = True
        original = group.copies[0]
        if req is not original:
            for name in RUNTIME_FIELDS:
                setattr(original, name, getattr(req, name))
        return original

    def cancelled_copy(self, req: Request, where: tuple[int, tuple[int, int]] | None) -> None:
        """A cancelled copy is gone: from its instance (``where``: the instance's global number and the
        copy's work there: prompt tokens computed, tokens generated), or from the dispatch (None)."""
        group = self.by_id[req.request_id]
        self.cancelled += 1
        self._leave(group, group.copies.index(req), where)

    def _leave(self, group: HedgeGroup, i: int, where: tuple[int, tuple[int, int]] | None) -> None:
        """Copy ``i`` no longer holds anything; ``where``: its work to count as wasted, if any."""
        if group.gone[i]:
            raise SimulationError(f"hedging: a copy of request {group.copies[0].request_id} left twice")
        group.gone[i] = True
        if where is None:
            return
        instance, (prefill, decode) = where
        group.wasted_prefill += prefill
        group.wasted_decode += decode
        if prefill or decode:
            group.waste.append((instance, prefill, decode))

    def at_horizon(self, pending: dict[int, Request], where: Any) -> dict[int, Request]:
        """The requests in flight when the run stops, one per request: a group's copies collapse into the
        original, carrying the times of the winner (else of its lowest copy in flight); the other copies'
        work is wasted. ``where(req)``: as for :meth:`cancelled_copy`."""
        out: dict[int, Request] = {}
        groups: dict[int, list[Request]] = {}
        for rid, req in pending.items():
            group = self.by_id.get(rid)
            if group is None:
                out[rid] = req
            else:
                groups.setdefault(group.copies[0].request_id, []).append(req)
        for rid, copies in sorted(groups.items()):
            group = self.by_id[rid]
            keep = None
            if not group.recorded:
                keep = group.copies[group.winner] if group.winner >= 0 else min(copies, key=group.copies.index)
            for req in copies:
                if req is not keep:
                    self._leave(group, group.copies.index(req), where(req))
            if keep is not None:
                self._leave(group, group.copies.index(keep), None)
                out[rid] = self._record(group, keep)
        return out

    def in_flight(self, places: dict[int, str]) -> dict[int, str]:
        """``places`` (copy id -> where) by request: each unrecorded request under its own id, once."""
        out: dict[int, str] = {}
        for rid, where in places.items():
            group = self.by_id.get(rid)
            if group is None:
                out[rid] = where
            elif not group.recorded:
                out.setdefault(group.copies[0].request_id, where)
        return out


def hedging_columns(
    hedgers: list[Hedger], request_ids: np.ndarray, gpu_s_per_token: dict[int, tuple[float, float]]
) -> dict[str, np.ndarray]:
    """requests.parquet's hedging columns, in the table's row order: copies sent (1: not hedged), the
    copy that answered first (0: the request itself; -1: not hedged or never answered), and the work
    its cancelled copies wasted, in GPU-seconds at ``gpu_s_per_token`` (per global instance, a prefill
    and a decode token's)."""
    n = request_ids.size
    copies = np.ones(n, dtype=np.int64)
    winner = np.full(n, -1, dtype=np.int64)
    prefill = np.zeros(n, dtype=np.int64)
    decode = np.zeros(n, dtype=np.int64)
    gpu_s = np.zeros(n, dtype=np.float64)
    groups = [item for hedger in hedgers for item in hedger.groups.items()]
    row = {int(rid): i for i, rid in enumerate(request_ids)} if groups else {}
    for rid, group in groups:
        i = row[rid]
        copies[i] = len(group.copies)
        winner[i] = group.winner
        prefill[i] = group.wasted_prefill
        decode[i] = group.wasted_decode
        for inst, pf, dec in group.waste:
            per_prefill, per_decode = gpu_s_per_token[inst]
            gpu_s[i] += pf * per_prefill + dec * per_decode
    return {
        "copies": copies, "hedge_winner": winner, "wasted_prefill_tokens": prefill,
        "wasted_decode_tokens": decode, "wasted_gpu_s": gpu_s,
    }  # fmt: skip
