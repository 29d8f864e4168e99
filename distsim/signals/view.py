"""What policies see: a read-only view over their candidate instances.

A router never touches an instance. It reads signals (possibly stale, see signals.py), the
router-owned counters (always current), the router's own prefix index, and static facts about the
instances. Under P/D disaggregation the prefill router and the decode router each get a view of
their own pool, so every policy is written once, for "n candidate instances".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distsim.events.loop import EventLoop
from distsim.request import Request
from distsim.signals.board import SignalBoard
from distsim.signals.prefix_index import PrefixIndex
from distsim.signals.settings import SIGNALS


class RouterState:
    """Counters the router keeps itself (always current), over all instances."""

    def __init__(self, n: int):
        self.in_transit = np.zeros(n, dtype=np.int64)  # routed, not yet in the instance's queue
        self.outstanding = np.zeros(n, dtype=np.int64)  # routed, not yet finished there


class ClusterView:
    def __init__(
        self,
        board: SignalBoard,
        state: RouterState,
        loop: EventLoop,
        members: np.ndarray,
        *,
        prefix_index: PrefixIndex | None,
        facts: dict[str, np.ndarray],
        step_models: list[Any],
    ):
        self._board = board
        self._state = state
        self._loop = loop
        self._index = prefix_index
        self._all_facts = facts  # over every instance, so membership can change (autoscaling)
        self._all_models = step_models
        self.adapters: np.ndarray | None = None  # engine x LoRA adapter: held in a GPU slot (distsim.lora sets it)
        self.set_members(members)

    def set_members(self, members: np.ndarray) -> None:
        """Make ``members`` (global instance indices, ascending) the candidates. Autoscaling calls it when a
        replica starts or stops serving; the owner of the view then tells its policies
        (``Router.members_changed``), since candidate positions shift."""
        board = self._board
        self.members = members  # global instance index of each candidate
        self._all = members.size == len(board.waiting) and bool(np.all(members == np.arange(members.size)))
        self.n = int(members.size)
        self.facts = {k: v[members] for k, v in self._all_facts.items()}  # static per-instance facts
        self.step_models = [self._all_models[i] for i in members]

    def _pick(self, arr: np.ndarray) -> np.ndarray:
        return arr if self._all else arr[self.members]

    @property
    def now(self) -> int:
        return self._loop.now

    # instance-reported (refreshed per the signals config)
    def queue_depth(self) -> np.ndarray:
        return self._pick(self._board.read("queue_depth"))

    def running(self) -> np.ndarray:
        return self._pick(self._board.read("running"))

    def kv_utilization(self) -> np.ndarray:
        return self._pick(self._board.read("kv_utilization"))

    def kv_utilization_bound(self) -> tuple[np.ndarray, bool]:
        """KV use at most the true value, exact except at :meth:`kv_loose_positions` (the flag: whether
        there may be any); :meth:`kv_utilization_exact` gives the true value where it matters."""
        util, loose = self._board.kv_bound()
        return self._pick(util), loose

    def kv_loose_positions(self) -> np.ndarray:
        """The candidate positions (ascending) whose bounded KV use may be below the true one."""
        slots = self._board.kv_loose()
        if self._all:
            return slots
        members = self.members
        where = np.minimum(np.searchsorted(members, slots), members.size - 1)
        return where[members[where] == slots]

    def kv_loose_among(self, positions: np.ndarray) -> np.ndarray:
        """Those of the candidate ``positions`` whose bounded KV use may be below the true one."""
        return positions[self._board.kv_loose_at(positions if self._all else self.members[positions])]

    def kv_utilization_exact(self, position: int) -> float | None:
        """The true KV use of the candidate at ``position`` where the bound gave less (else None)."""
        return self._board.kv_exact(position if self._all else int(self.members[position]))

    def cache_hit_rate(self) -> np.ndarray:
        return self._pick(self._board.read("cache_hit_rate"))

    def queued_tokens(self) -> np.ndarray:
        return self._pick(self._board.read("queued_tokens"))

    def signal_age_ms(self) -> float:
        """The age of the oldest instance-reported signal a read returns now (0 when read live)."""
        return max(self._board.age_us(name) for name in SIGNALS) / 1000.0

    # router-owned (always current)
    def in_transit(self) -> np.ndarray:
        return self._pick(self._state.in_transit)

    def outstanding(self) -> np.ndarray:
        return self._pick(self._state.outstanding)

    def clairvoyant_engines(self) -> list[Any]:
        """The candidate engines themselves, for the clairvoyant reference router (distsim.policies.oracle)
        only: no deployable policy calls it (tests/test_policies_never_read_output_length.py)."""
        engines = self._board.instances
        return [engines[i] for i in self.members]

    def adapter_resident(self, adapter: int) -> np.ndarray:
        """1.0 for each candidate whose GPU slots hold ``adapter`` (or are loading it), else 0.0; all 0 for the
        base model or without LoRA. Read live: vLLM reports its loaded adapters in its metrics
        (``vllm:lora_requests_info``), which a LoRA-aware router such as llm-d's scrapes."""
        held = self.adapters
        if held is None or not 0 <= adapter < held.shape[1]:
            return np.zeros(self.n)
        return self._pick(held[:, adapter]).astype(np.float64)

    def prefix_match(self, req: Request) -> np.ndarray:
        """Blocks of the request's prompt each candidate holds, per the router's own index."""
        if self._index is None:
            raise RuntimeError("this router did not ask for a prefix index (uses_prefix_index)")
        return self._pick(self._index.match(req.block_hashes))
