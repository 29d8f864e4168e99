"""Multi-turn sessions: follow-up turns merged into one time-ordered stream.

A session starts with a first turn from the synthetic pipeline. Turn k+1 arrives a think time after
turn k *arrived* (the workload is open-loop: it cannot see when the answer came back), and its prompt
is turn k's prompt, turn k's answer and some new user tokens. Its block keys extend turn k's keys, so a
prefix cache that still holds turn k's prompt hits on all of it. (The answer's tokens get fresh keys:
we do not assume the engine caches the blocks it decoded.)

Pending follow-ups wait in a small heap ordered by (arrival_us, sequence), so memory grows with the
number of open sessions, never with the number of requests.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

import numpy as np

from distsim.request import Request, new_request
from distsim.workload import checks
from distsim.workload.keys import UniqueKeys
from distsim.workload.lengths import Buffered, Sampler
from distsim.workload.prefixes import PrefixGroups
from distsim.workload.schema import SessionConfig


class _Session:
    __slots__ = (
        "sid",
        "tenant",
        "slo_class",
        "ttft",
        "tpot",
        "prio",
        "in_idx",
        "out_idx",
        "left",
        "keys",
        "prompt",
        "output",
        "t",
    )


class Sessions:
    """Session settings (``workload.sessions``), validated once; :meth:`merge` runs one stream."""

    def __init__(self, cfg, key: str):
        schema = SessionConfig()
        self.turns = Sampler(cfg.turns, f"{key}.turns", integer=True, default=schema.turns)
        self.think = Sampler(cfg.think_time_s, f"{key}.think_time_s", integer=False, default=schema.think_time_s)
        self.max_context = (
            None
            if cfg.max_context_tokens is None
            else checks.integer(f"{key}.max_context_tokens", cfg.max_context_tokens, low=1)
        )

    # long: one generator interleaving first turns and follow-up turns in arrival order; the heap, counters
    # and buffered samplers are its loop state, and their draw order fixes the request stream (golden tests)
    def merge(
        self,
        firsts: Iterator[tuple],
        rng: np.random.Generator,
        input_samplers: list[Sampler],
        output_samplers: list[Sampler],
        prefixes: PrefixGroups,
        block_size: int,
        limit: int | None,
        duration_us: int | None,
        stats: dict,
    ) -> Iterator[Request]:
        """Requests of all sessions in arrival order.

        ``firsts`` yields first turns in arrival order as tuples (arrival_s, arrival_us, prompt, output,
        tenant, slo_class, ttft_ms, tpot_ms, priority, group, input_idx, output_idx).
        """
        turns = Buffered(self.turns, rng)
        think = Buffered(self.think, rng)
        new_in = [Buffered(s, rng) for s in input_samplers]
        new_out = [Buffered(s, rng) for s in output_samplers]
        unique = UniqueKeys()
        heap: list = []
        seq = 0
        sid = 0
        rid = 0
        nxt = next(firsts, None)
        while limit is None or rid < limit:
            if heap and (nxt is None or heap[0][0] <= nxt[1]):
                us, _, s = heapq.heappop(heap)
                if duration_us is not None and us > duration_us:
                    break
                n_keys = s.prompt // block_size
                s.keys = s.keys + unique.take(n_keys - len(s.keys))
                req = new_request(rid, us, s.prompt, s.output, s.tenant, s.slo_class, s.sid, s.keys, s.ttft, s.tpot, s.prio)
            elif nxt is not None:
                t, us, prompt, output, tenant, cls, ttft, tpot, prio, group, in_idx, out_idx = nxt
                nxt = next(firsts, None)
                s = _Session()
                s.sid, s.t, s.prompt, s.output = sid, t, prompt, output
                s.tenant, s.slo_class, s.ttft, s.tpot, s.prio = tenant, cls, ttft, tpot, prio
                s.in_idx, s.out_idx = in_idx, out_idx
                s.left = turns.next()
                sid += 1
                if group >= 0:
                    s.keys = prefixes.block_keys(group, prompt, unique)
                elif s.left > 1:
                    s.keys = unique.take(prompt // block_size)
                else:
                    s.keys = None
                req = new_request(rid, us, prompt, output, tenant, cls, s.sid, s.keys, ttft, tpot, prio)
            else:
                break
            yield req
            rid += 1
            s.left -= 1
            if s.left > 0:
                prompt = s.prompt + s.output + new_in[s.in_idx].next()
                if self.max_context is None or prompt <= self.max_context:
                    s.prompt = prompt
                    s.output = new_out[s.out_idx].next()
                    s.t += think.next()
                    heapq.heappush(heap, (round(s.t * 1_000_000), seq, s))
                    seq += 1
        stats["sessions"] = sid
        stats["requests"] = rid
