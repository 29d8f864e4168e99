"""Closed-loop sessions (``workload.sessions.closed_loop``): chats and agents whose next turn waits for the
reply, with the context growing turn by turn and tool calls between turns.

Sessions start open-loop, at the workload's arrival process (a session's first turn is one of the
synthetic pipeline's requests), or at a session trace's first rows. Inside a session the loop is closed:
turn k+1 goes out a think time after turn k's reply reached the client, or, when turn k ended in tool
calls (``workload.sessions.tools``: a share of turns, a fan-out of parallel calls, each with its latency
and result size), when the slowest call returns. Its prompt is the whole conversation so far, as chat
templates send it: turn k's prompt, turn k's answer, and the new tokens (a user's message, or the tool
results); its block keys extend turn k's, so a prefix cache that still holds turn k's prompt hits on it.

Determinism: opening a session, sending a turn and every reply are events at PRIO_ARRIVAL (the shared
Driver, distsim/workload/driven.py); the draws (turns, think times, new tokens, tool calls) come from the
sessions' stream ("workload/sessions") in event order, and request ids follow the sends.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.events.rng import stream
from distsim.request import Request, Status, new_request
from distsim.workload import checks
from distsim.workload.base import ArrivalSink, DrivenSource
from distsim.workload.driven import Driver
from distsim.workload.keys import UniqueKeys
from distsim.workload.lengths import Buffered, Sampler
from distsim.workload.schema import ToolCallConfig


@dataclass(frozen=True)
class ToolCalls:
    """``workload.sessions.tools``, checked (None where ``share`` is 0)."""

    share: float
    calls: Sampler
    latency_s: Sampler
    result_tokens: Sampler


def tool_calls(cfg, key: str) -> ToolCalls | None:
    share = checks.fraction(f"{key}.share", cfg.share)
    schema = ToolCallConfig()
    parts = (
        Sampler(cfg.calls, f"{key}.calls", integer=True, default=schema.calls),
        Sampler(cfg.latency_s, f"{key}.latency_s", integer=False, default=schema.latency_s),
        Sampler(cfg.result_tokens, f"{key}.result_tokens", integer=True, default=schema.result_tokens),
    )
    return ToolCalls(share, *parts) if share > 0 else None


class Session:
    """One session's state between its turns."""

    __slots__ = ("sid", "tags", "in_idx", "out_idx", "left", "keys", "prompt", "output", "turn", "tools_before")

    def __init__(self, sid: int, tags: tuple, in_idx: int, out_idx: int, left: int, prompt: int, output: int, keys):
        self.sid, self.tags, self.in_idx, self.out_idx = sid, tags, in_idx, out_idx
        self.left, self.prompt, self.output, self.keys = left, prompt, output, keys
        self.turn = 0
        self.tools_before = 0  # tool calls whose results open the next turn


class ClosedLoopSessions(DrivenSource):
    """The synthetic source's sessions (``source``: a SyntheticSource with sessions on), closed-loop.
    After the run: ``turn_of`` and ``tools_of`` (by request id) give each request's turn in its session and
    the tool calls whose results opened it; ``tool_calls`` counts those of the turns sent; ``finished`` lists the sessions
    whose every turn was answered (not cut by workload.num_requests, the duration or a refused turn)."""

    feature = "sessions"

    def __init__(self, source: Any, tools: ToolCalls | None):
        self.source, self.tools = source, tools
        self.limit, self.duration_us = source.limit, source.duration_us
        self.reply_lag_us = 0  # the front end's output lag (set by the feature before the run)
        self.turn_of = array("q")
        self.tools_of = array("q")
        self.tool_calls = 0
        self.sessions = 0
        self.finished = array("q")  # the sessions whose every turn was answered, as they finished

    def describe(self) -> dict:
        return {**self.source.describe(), "closed_loop": True}

    def drive(self, sink: ArrivalSink) -> None:
        _SessionLoop(self, sink).start()


class _SessionLoop(Driver):
    """One run's sessions: the next session to open (one pending at a time), the open ones, the draws."""

    def __init__(self, src: ClosedLoopSessions, sink: ArrivalSink):
        super().__init__(sink, src.reply_lag_us)
        self.src = src
        source = src.source
        sessions, tagger = source.sessions, source.tagger
        rng = stream(source.seed, "workload/sessions")
        self.turns, self.think = Buffered(sessions.turns, rng), Buffered(sessions.think, rng)
        self.new_in = [Buffered(s, rng) for s in tagger.input_samplers]
        self.new_out = [Buffered(s, rng) for s in tagger.output_samplers]
        self.max_context = sessions.max_context
        tools = src.tools
        if tools is not None:
            self.tool_draw = Buffered(_Uniform(), rng)
            self.calls, self.latency = Buffered(tools.calls, rng), Buffered(tools.latency_s, rng)
            self.results = Buffered(tools.result_tokens, rng)
        self.firsts: Iterator[tuple] = source.first_turns()
        self.prefixes, self.block_size = source.prefixes, source.block_size
        self.unique = UniqueKeys()
        self.open = 0  # sessions started and not yet over
        self.starts_over = False

    def start(self) -> None:
        self._pull()

    def _pull(self) -> None:
        nxt = next(self.firsts, None)
        if nxt is None:
            self.starts_over = True
            self._end_if_done()
        else:
            self.at(nxt[1], self._open, nxt)

    def _full(self) -> bool:
        return self.src.limit is not None and self.sent >= self.src.limit

    def _open(self, now: int, first: tuple) -> None:
        """A session's first turn: the synthetic pipeline's request (its lengths, tags and shared prefix)."""
        if self._full():
            self.starts_over = True
            self._end_if_done()
            return
        self._pull()
        _, _, prompt, output, tenant, cls, ttft, tpot, prio, group, in_idx, out_idx = first
        left = self.turns.next()
        if group >= 0:
            keys = self.prefixes.block_keys(group, prompt, self.unique)
        else:
            keys = self.unique.take(prompt // self.block_size)
        s = Session(self.src.sessions, (tenant, cls, ttft, tpot, prio), in_idx, out_idx, left, prompt, output, keys)
        self.src.sessions += 1
        self.open += 1
        self._send_turn(now, s)

    def _send_turn(self, now: int, s: Session) -> None:
        tenant, cls, ttft, tpot, prio = s.tags
        n_keys = s.prompt // self.block_size
        if n_keys > len(s.keys):
            s.keys = s.keys + self.unique.take(n_keys - len(s.keys))
        req = new_request(-1, now, s.prompt, s.output, tenant, cls, s.sid, s.keys, ttft, tpot, prio)
        self.src.turn_of.append(s.turn)
        self.src.tools_of.append(s.tools_before)
        self.src.tool_calls += s.tools_before
        s.left -= 1
        self.send(now, req, s)

    def replied(self, s: Session, req: Request, at_us: int) -> None:
        """Turn ``s.turn`` is answered: the next one goes out after a think time or the tool calls, its
        prompt the conversation so far plus the new tokens; the session ends after its last turn, or before
        a prompt that would exceed max_context_tokens."""
        if req.status is not Status.COMPLETED:  # no answer to build on: the session ends here
            return self._close()
        if s.left <= 0:  # its last turn is answered
            self.src.finished.append(s.sid)
            return self._close()
        tools = self.src.tools
        if tools is not None and self.tool_draw.next() < tools.share:
            n = self.calls.next()
            wait_s = max(self.latency.next() for _ in range(n))  # parallel calls: the slowest one
            new = sum(self.results.next() for _ in range(n))
            s.tools_before = n
        else:
            wait_s, new = self.think.next(), self.new_in[s.in_idx].next()
            s.tools_before = 0
        prompt = s.prompt + s.output + new
        if self.max_context is not None and prompt > self.max_context:  # the conversation is as long as it gets
            self.src.finished.append(s.sid)
            return self._close()
        s.prompt, s.output, s.turn = prompt, self.new_out[s.out_idx].next(), s.turn + 1
        self.at(at_us + round(wait_s * 1_000_000), self._next_turn, s)

    def _next_turn(self, now: int, s: Session) -> None:
        duration = self.src.duration_us
        if self._full() or (duration is not None and now > duration):
            self._close()
        else:
            self._send_turn(now, s)

    def _close(self) -> None:
        self.open -= 1
        self._end_if_done()

    def _end_if_done(self) -> None:
        if self.starts_over and self.open == 0:
            self.end()


class _Uniform:
    """A sampler of uniform [0, 1) draws (whether a turn ends in tool calls), for Buffered."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.random(n)


def closed_loop_sessions(source: Any, cfg) -> ClosedLoopSessions:
    """The synthetic ``source``'s sessions, each turn waiting for the previous reply."""
    if cfg.kind != "synthetic":
        raise ConfigError("workload.sessions.closed_loop", "closed-loop sessions need workload.kind=synthetic")
    if cfg.get("mix") is not None:
        raise ConfigError("workload.sessions.closed_loop", "closed-loop sessions serve LLM requests only: unset workload.mix")
    return ClosedLoopSessions(source, tool_calls(cfg.sessions.tools, "workload.sessions.tools"))
