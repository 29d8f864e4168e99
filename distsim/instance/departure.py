"""The one event an engine tells of a request leaving it, and who subscribes.

A request leaves an engine in one of three ways: it reached a final status there (completed, refused as
too long, dropped as never fitting), it was aborted (a hedge's losing copy let go, its blocks free), or,
on a P/D prefill engine, the blocks it held for its KV hand-off were released (the KV has been sent; the
request itself had left the running set at the hand-off). Each listener on the engine's
``departure_listeners`` is called with ``(request, now, how)``, in subscription order, after the engine's
own books are updated.

Who subscribes: the cluster that owns the engine, first, when it connects the engine
(:meth:`distsim.instance.instance.Instance.connect`: it records finished requests and settles a hedge's
cancelled copy), and an autoscaler's drain while the engine's replica drains (it checks whether the
replica can leave). A batching runtime replica (distsim.runtime.replica) tells the same event. The list is
walked only when a request leaves, never per step.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distsim.request import Request


class Departure(IntEnum):
    FINISHED = 0  # reached its final status here (the request's ``status`` says which)
    ABORTED = 1  # cancelled (a hedge's losing copy) and let go
    RELEASED = 2  # P/D prefill side: the blocks held for the KV hand-off are free


DepartureListener = Callable[["Request", int, Departure], None]
