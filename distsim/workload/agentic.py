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


class SessionSource(DrivenSource):
    """Sessions sent closed-loop. After the run: ``turn_of`` and ``tools_of`` (by request id) give each
    request's turn in its session and the tool calls whose results opened it; ``tool_calls`` counts those of
    the turns sent; ``sessions`` those started; ``finished`` lists the sessions whose every turn was answered
    (not cut by workload.num_requests, the duration or a refused turn). Session ids are 0, 1, 2, ... in the
    order the sessions start."""

    feature = "sessions"

    def __init__(self, source: Any):
        self.source = source
        self.limit, self.duration_us = source.limit, source.duration_us
        self.reply_lag_us = 0  # the front end's output lag (set by the feature before the run)
        self.turn_of = array("q")
        self.tools_of = array("q")
        self.tool_calls = 0
        self.sessions = 0
        self.finished = array("q")

    def describe(self) -> dict:
        return {**self.source.describe(), "closed_loop": True}

    def summary(self) -> dict | None:
        return self.source.summary()


class ClosedLoopSessions(SessionSource):
    """The synthetic source's sessions (``source``: a SyntheticSource with sessions on), turns drawn as the
    replies come."""

    def __init__(self, source: Any, tools: ToolCalls | None):
        super().__init__(source)
        self.tools = tools

    def drive(self, sink: ArrivalSink) -> None:
        _SyntheticSessions(self, sink).start()


class TraceSessions(SessionSource):
    """A session trace's sessions (``source``: a TraceSource whose rows name their session): each turn's
    lengths as recorded, sent its recorded ``wait_s`` after the previous turn's reply; a session starts at
    its first row's time. The trace is read whole when the run starts (a session's later turns are needed
    before the file's time order reaches them)."""

    def drive(self, sink: ArrivalSink) -> None:
        _TraceSessions(self, sink).start()


class _Sessions(Driver):
    """One run's sessions: the next session to open (one pending at a time), the open ones; a subclass
    says what a session's first and next turns are."""

    def __init__(self, src: SessionSource, sink: ArrivalSink):
        super().__init__(sink, src.reply_lag_us)
        self.src = src
        self.open = 0  # sessions started and not yet over
        self.starts_over = False

    def start(self) -> None:
        self._pull()

    def _pull(self) -> None:
        nxt = self.next_start()
        if nxt is None:
            self.starts_over = True
            self._end_if_done()
        else:
            self.at(nxt[0], self._open, nxt[1])

    def _full(self) -> bool:
        return self.src.limit is not None and self.sent >= self.src.limit

    def _open(self, now: int, first: Any) -> None:
        if self._full():
            self.starts_over = True
            self._end_if_done()
            return
        self._pull()
        s = self.open_session(self.src.sessions, first)
        self.src.sessions += 1
        self.open += 1
        self._send_turn(now, s)

    def _send_turn(self, now: int, s: Any) -> None:
        req = self.turn_request(now, s)
        self.src.turn_of.append(s.turn)
        self.src.tools_of.append(s.tools_before)
        self.src.tool_calls += s.tools_before
        s.left -= 1
        self.send(now, req, s)

    def replied(self, s: Any, req: Request, at_us: int) -> None:
        """A turn is answered: the session's next turn goes out after its wait, or the session ends (its
        last turn answered, its context full, or no answer to build on)."""
        if req.status is not Status.COMPLETED:
            return self._close()
        wait_us = self.next_turn(s) if s.left > 0 else None
        if wait_us is None:
            self.src.finished.append(s.sid)
            return self._close()
        s.turn += 1
        self.at(at_us + wait_us, self._next_turn, s)

    def _next_turn(self, now: int, s: Any) -> None:
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

    # what a subclass says
    def next_start(self) -> tuple[int, Any] | None:  # pragma: no cover - abstract
        """The next session's start time and first turn, or None when no session is left."""
        raise NotImplementedError

    def open_session(self, sid: int, first: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def turn_request(self, now: int, s: Any) -> Request:  # pragma: no cover - abstract
        """The request of ``s``'s current turn."""
        raise NotImplementedError

    def next_turn(self, s: Any) -> int | None:  # pragma: no cover - abstract
        """Prepare ``s``'s next turn; its wait after the reply in microseconds, or None: the session is over."""
        raise NotImplementedError


class _SyntheticSessions(_Sessions):
    """Sessions of the synthetic pipeline: first turns from its arrival process, the rest drawn."""

    def __init__(self, src: ClosedLoopSessions, sink: ArrivalSink):
        super().__init__(src, sink)
        source = src.source
        sessions, tagger = source.sessions, source.tagger
        rng = stream(source.seed, "workload/sessions")
        self.turns, self.think = Buffered(sessions.turns, rng), Buffered(sessions.think, rng)
        self.new_in = [Buffered(s, rng) for s in tagger.input_samplers]
        self.new_out = [Buffered(s, rng) for s in tagger.output_samplers]
        self.max_context = sessions.max_context
        self.tools = tools = src.tools
        if tools is not None:
            self.tool_draw = Buffered(_Uniform(), rng)
            self.calls, self.latency = Buffered(tools.calls, rng), Buffered(tools.latency_s, rng)
            self.results = Buffered(tools.result_tokens, rng)
        self.firsts: Iterator[tuple] = source.first_turns()
        self.prefixes, self.block_size = source.prefixes, source.block_size
        self.unique = UniqueKeys()

    def next_start(self) -> tuple[int, Any] | None:
        nxt = next(self.firsts, None)
        return None if nxt is None else (nxt[1], nxt)

    def open_session(self, sid: int, first: tuple) -> Session:
        """A session's first turn: the synthetic pipeline's request (its lengths, tags and shared prefix)."""
        _, _, prompt, output, tenant, cls, ttft, tpot, prio, group, in_idx, out_idx = first
        left = self.turns.next()
        if group >= 0:
            keys = self.prefixes.block_keys(group, prompt, self.unique)
        else:
            keys = self.unique.take(prompt // self.block_size)
        return Session(sid, (tenant, cls, ttft, tpot, prio), in_idx, out_idx, left, prompt, output, keys)

    def turn_request(self, now: int, s: Session) -> Request:
        tenant, cls, ttft, tpot, prio = s.tags
        n_keys = s.prompt // self.block_size
        if n_keys > len(s.keys):
            s.keys = s.keys + self.unique.take(n_keys - len(s.keys))
        return new_request(-1, now, s.prompt, s.output, tenant, cls, s.sid, s.keys, ttft, tpot, prio)

    def next_turn(self, s: Session) -> int | None:
        """After a think time a user's message, or after tool calls their results, joins the conversation so
        far; None before a prompt would exceed max_context_tokens."""
        tools = self.tools
        if tools is not None and self.tool_draw.next() < tools.share:
            n = self.calls.next()
            wait_s = max(self.latency.next() for _ in range(n))  # parallel calls: the slowest one
            new = sum(self.results.next() for _ in range(n))
            s.tools_before = n
        else:
            wait_s, new = self.think.next(), self.new_in[s.in_idx].next()
            s.tools_before = 0
        prompt = s.prompt + s.output + new
        if self.max_context is not None and prompt > self.max_context:
            return None  # the conversation is as long as it gets
        s.prompt, s.output = prompt, self.new_out[s.out_idx].next()
        return round(wait_s * 1_000_000)


class _Recorded:
    """A trace session: its recorded turns (request, wait after the previous reply in us, tool calls)."""

    __slots__ = ("sid", "turns", "turn", "left", "tools_before")

    def __init__(self, sid: int, turns: list):
        self.sid, self.turns, self.turn, self.left = sid, turns, 0, len(turns)
        self.tools_before = 0


class _TraceSessions(_Sessions):
    """Sessions of a trace, in the order their first rows come; rows without a session are sessions of one."""

    def __init__(self, src: TraceSessions, sink: ArrivalSink):
        super().__init__(src, sink)
        plans: dict[Any, list] = {}
        for n, (req, wait_us, calls) in enumerate(src.source.session_turns()):
            key = ("row", n) if req.session_id < 0 else req.session_id
            plans.setdefault(key, []).append((req, wait_us, calls))
        self.plans = iter(plans.values())

    def next_start(self) -> tuple[int, Any] | None:
        turns = next(self.plans, None)
        return None if turns is None else (turns[0][0].arrival_us, turns)

    def open_session(self, sid: int, turns: list) -> _Recorded:
        return _Recorded(sid, turns)

    def turn_request(self, now: int, s: _Recorded) -> Request:
        req = s.turns[s.turn][0]
        req.session_id = s.sid
        return req

    def next_turn(self, s: _Recorded) -> int | None:
        _, wait_us, calls = s.turns[s.turn + 1]
        s.tools_before = calls
        return wait_us


class _Uniform:
    """A sampler of uniform [0, 1) draws (whether a turn ends in tool calls), for Buffered."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.random(n)


def closed_loop_sessions(source: Any, cfg) -> SessionSource:
    """``source``'s sessions, each turn waiting for the previous reply: a synthetic source's drawn as they
    go, a trace's as recorded."""
    if cfg.get("mix") is not None:
        raise ConfigError("workload.sessions.closed_loop", "closed-loop sessions serve LLM requests only: unset workload.mix")
    if cfg.kind == "trace":
        if cfg.jitter_s:
            raise ConfigError("workload.jitter_s", "closed-loop sessions replay the trace's own times: unset jitter_s")
        return TraceSessions(source)
    return ClosedLoopSessions(source, tool_calls(cfg.sessions.tools, "workload.sessions.tools"))
