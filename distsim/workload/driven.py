"""What every driven source's run shares (closed-loop clients, closed-loop sessions): sending a request on
the world's loop, hearing its reply, and saying when no request will come any more.

Why one base: the closed loop's determinism rests on a few rules that must be the same everywhere: a
request's id is given when it is sent (so ids follow the sends), every send is an event at PRIO_ARRIVAL
(ordered by time, priority, sequence), and a reply counts when the last token reaches the client (the
front end's output lag included), or at once for a refused or dropped request.
"""

from __future__ import annotations

from typing import Any

from distsim.events.loop import PRIO_ARRIVAL
from distsim.request import Request
from distsim.workload.base import ArrivalSink


class Driver:
    """One run of a driven source on ``sink``. ``replied(owner, req, at_us)`` is told of each reply, with
    the instant the client reads it; ``owner`` is what ``send`` was given (a client, a session)."""

    def __init__(self, sink: ArrivalSink, reply_lag_us: int = 0):
        self.sink, self.loop = sink, sink.loop
        self.reply_lag_us = reply_lag_us
        self.owner: dict[int, Any] = {}  # request id -> its owner, while the request is out
        self.sent = 0
        self.ended = False
        sink.record_listeners.append(self._recorded)

    def at(self, time_us: int, handler, arg: Any = None) -> None:
        """Call ``handler(now, arg)`` at ``time_us``, among the arrivals."""
        self.loop.schedule(time_us, PRIO_ARRIVAL, handler, arg)

    def send(self, now: int, req: Request, owner: Any) -> None:
        """``req`` goes out now, with the next request id."""
        req.request_id, req.arrival_us = self.sent, now
        self.sent += 1
        self.owner[req.request_id] = owner
        self.sink.arrive(now, req)

    def _recorded(self, req: Request) -> None:
        owner = self.owner.pop(req.request_id)  # every request is ours (a hedge records its original's id)
        now = self.loop.now
        back = req.completion_us + self.reply_lag_us if req.completion_us >= 0 else now
        self.replied(owner, req, max(now, back))

    def replied(self, owner: Any, req: Request, at_us: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def end(self) -> None:
        """No request will be sent any more (once)."""
        if not self.ended:
            self.ended = True
            self.sink.end_arrivals()
