"""Synthetic traffic: an arrival process, tagged and sized requests, prefix groups and sessions.

Each part draws from its own sub-stream of the workload stream ("workload/arrivals", "workload/tenants",
"workload/lengths", "workload/prefix", "workload/sessions"), so e.g. adding tenants leaves the arrival
times unchanged. Requests are drawn in numpy blocks of ``BLOCK`` and turned into ``Request`` objects
one at a time: memory stays flat however many requests are generated.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from distsim.events.rng import stream
from distsim.request import Request, new_request
from distsim.workload import checks
from distsim.workload.arrivals import build_arrivals, warn_unread_arrival
from distsim.workload.base import WorkloadSource
from distsim.workload.keys import UniqueKeys
from distsim.workload.kinds import KINDS
from distsim.workload.prefixes import PrefixGroups
from distsim.workload.schema import SessionConfig, ToolCallConfig
from distsim.workload.sessions import Sessions
from distsim.workload.source import limits, warn_other_kinds_keys
from distsim.workload.tenants import Tagger

BLOCK = 4096


class SyntheticSource(WorkloadSource):
    def __init__(self, cfg, seed: int, block_size: int):
        self.cfg = cfg
        self.seed = seed
        self.block_size = block_size
        self.limit, self.duration_us = limits(cfg, need_one=True)
        build_arrivals(cfg.arrival, "workload.arrival", stream(seed, "workload/arrivals"))  # validates
        warn_unread_arrival(cfg.arrival, "workload.arrival")
        warn_other_kinds_keys(cfg)
        self.tagger = Tagger(cfg)
        self.prefixes = PrefixGroups(cfg.prefix, "workload.prefix", block_size)
        self.sessions = Sessions(cfg.sessions, "workload.sessions") if cfg.sessions.enabled else None
        if self.sessions is None:
            checks.warn_unread(cfg.sessions, "workload.sessions", ("enabled",),
                               "workload.sessions.enabled false does not use it", SessionConfig())
        elif not cfg.sessions.closed_loop:  # tool calls wait for replies: only closed-loop sessions make them
            checks.warn_unread(cfg.sessions.tools, "workload.sessions.tools", (),
                               "workload.sessions.closed_loop false does not use it", ToolCallConfig())
        self.stats: dict = {}

    def describe(self) -> dict:
        return {"kind": "synthetic", "arrival": self.cfg.arrival.process, **self.stats}

    def _blocks(self, limit: int | None) -> Iterator[tuple]:
        """Column blocks (arrival_s, arrival_us, prompt, output, group, tags), cut at the limits."""
        seed = self.seed
        arrivals = build_arrivals(self.cfg.arrival, "workload.arrival", stream(seed, "workload/arrivals"))
        rng_tag = stream(seed, "workload/tenants")
        rng_len = stream(seed, "workload/lengths")
        rng_pre = stream(seed, "workload/prefix")
        tagger, prefixes = self.tagger, self.prefixes
        done = 0
        while limit is None or done < limit:
            n = BLOCK if limit is None else min(BLOCK, limit - done)
            times = arrivals.next_times(n)
            if len(times) == 0:
                return
            n = len(times)
            us = np.rint(times * 1_000_000.0).astype(np.int64)
            tags = tagger.tag(rng_tag, n)
            prompt = tagger.lengths_for(rng_len, tags.input_idx, tagger.input_samplers)
            output = tagger.lengths_for(rng_len, tags.output_idx, tagger.output_samplers)
            if prefixes.active:
                group = prefixes.draw(rng_pre, n)
                prompt = prompt + np.where(group >= 0, prefixes.lengths[np.maximum(group, 0)], 0)
            else:
                group = None
            cut = n
            if self.duration_us is not None and us[-1] > self.duration_us:
                cut = int(np.searchsorted(us, self.duration_us, side="right"))
            yield (
                times[:cut],
                us[:cut],
                prompt[:cut],
                output[:cut],
                None if group is None else group[:cut],
                tags,
                cut,
            )
            done += cut
            if cut < n:
                return

    def __iter__(self) -> Iterator[Request]:
        if self.sessions is not None:
            return self._with_sessions()
        return self._plain()

    def _plain(self) -> Iterator[Request]:
        rid = 0
        unique = UniqueKeys()
        bs = self.block_size
        prefixes = self.prefixes
        for _, us, prompt, output, group, tags, cut in self._blocks(self.limit):
            cols = zip(
                us.tolist(),
                prompt.tolist(),
                output.tolist(),
                tags.tenant[:cut].tolist(),
                tags.slo_class,
                tags.ttft_ms,
                tags.tpot_ms,
                tags.priority,
                strict=False,  # tags cover the whole block, the columns may be cut
            )
            groups = group.tolist() if group is not None else None
            for i, (a, p, o, t, c, ttft, tpot, prio) in enumerate(cols):
                bh = None
                if groups is not None and groups[i] >= 0:
                    g = groups[i]
                    gk = prefixes.keys[g]
                    bh = gk + unique.take(p // bs - len(gk))
                yield new_request(rid, a, p, o, t, c, -1, bh, ttft, tpot, prio)
                rid += 1
        self.stats["requests"] = rid

    def first_turns(self) -> Iterator[tuple]:
        """Sessions' first turns in arrival order: (arrival_s, arrival_us, prompt, output, tenant, slo_class,
        ttft_ms, tpot_ms, priority, prefix group or -1, input sampler index, output sampler index)."""
        for times, us, prompt, output, group, tags, cut in self._blocks(None):
            g = group.tolist() if group is not None else [-1] * cut
            yield from zip(
                times.tolist(),
                us.tolist(),
                prompt.tolist(),
                output.tolist(),
                tags.tenant[:cut].tolist(),
                tags.slo_class[:cut],
                tags.ttft_ms[:cut],
                tags.tpot_ms[:cut],
                tags.priority[:cut],
                g,
                tags.input_idx[:cut].tolist(),
                tags.output_idx[:cut].tolist(),
                strict=True,
            )

    def _with_sessions(self) -> Iterator[Request]:
        t = self.tagger
        yield from self.sessions.merge(
            self.first_turns(),
            stream(self.seed, "workload/sessions"),
            t.input_samplers,
            t.output_samplers,
            self.prefixes,
            self.block_size,
            self.limit,
            self.duration_us,
            self.stats,
        )


@KINDS.register("synthetic")
def _build(cfg, seed: int, block_size: int) -> WorkloadSource:
    return SyntheticSource(cfg, seed, block_size)
