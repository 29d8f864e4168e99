"""Closed-loop sessions' feature: hands the source the front end's reply lag, and reports each request's
``turn`` and ``tool_calls`` (the calls whose results opened it) and summary.json's ``sessions`` section:
sessions started and finished, turns per finished session, the time to finish one (first turn sent to
last reply read), tool calls, and the prefix-cache hit rate of follow-up turns (the history they resend)."""

from __future__ import annotations

from typing import Any

import numpy as np

from distsim.closedloop.clients import refuse_capacity
from distsim.feature import Feature, Measures, Parts
from distsim.metrics.summary import distribution, rnd


class SessionsFeature(Feature):
    name = "sessions"

    def __init__(self) -> None:
        self.source: Any = None  # distsim.workload.agentic.ClosedLoopSessions

    @staticmethod
    def check(scenario: Any) -> None:
        """The capacity fitness needs a fixed stream of arrivals."""
        refuse_capacity(scenario, "workload.sessions.closed_loop")

    def attach(self, parts: Parts) -> None:
        self.source = parts.workload
        self.source.reply_lag_us = parts.recorder.output_lag_us

    def report(self, m: Measures) -> dict[str, Any]:
        src, table = self.source, m.table
        ids = table["request_id"]
        turn = np.asarray(src.turn_of, dtype=np.int64)[ids]
        tools = np.asarray(src.tools_of, dtype=np.int64)[ids]
        table.add("turn", turn, "int64")
        table.add("tool_calls", tools, "int64")
        sid = table["session_id"]
        finished = np.zeros(max(int(src.sessions), 1), dtype=bool)
        finished[np.asarray(src.finished, dtype=np.int64)] = True
        mine = finished[sid]  # rows of finished sessions
        order = np.argsort(sid[mine], kind="stable")
        sids = sid[mine][order]
        starts = np.flatnonzero(np.r_[True, sids[1:] != sids[:-1]]) if len(sids) else np.zeros(0, dtype=np.int64)
        if len(sids):
            first = np.minimum.reduceat(table["arrival_ms"][mine][order], starts)
            last = np.maximum.reduceat(table["completion_ms"][mine][order], starts)
        else:
            first = last = np.zeros(0)
        turns = np.diff(np.r_[starts, len(sids)])
        follow = turn > 0
        prompt = table["input_tokens"][follow].sum()
        return {
            "closed_loop": True,
            "started": int(src.sessions),
            "finished": len(starts),
            "turns": distribution(turns),
            "session_s": distribution((last - first) / 1000.0),
            "tool_calls": int(src.tool_calls),
            "follow_up_cache_hit_rate": rnd(table["cached_tokens"][follow].sum() / prompt) if prompt else None,
        }
