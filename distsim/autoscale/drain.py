"""Draining: a replica scaled down takes no new request (it is no longer a candidate) but finishes what it
holds, then leaves. Its engines' completion callbacks are wrapped while it drains, so the controller
checks for the end right after each request leaves it (a completion, a drop, a hedged copy let go, or
under P/D the end of a KV hand-off; every evaluation checks too); the wrappers go when it leaves, so no other instance pays anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def engine_idle(inst: Any, state: Any, i: int) -> bool:
    """Nothing is routed to instance ``i``, in transit to it, queued, running, loading, or held for a
    hand-off there."""
    return (
        state.outstanding[i] == 0 and state.in_transit[i] == 0 and not inst.running and not len(inst.waiting)
        and not inst.landed and not inst.loading and not inst.held and not inst.reserved and not inst.awaiting_blocks
    )


class DrainHooks:
    """Wraps and restores a draining engine's ``on_done``, ``on_aborted`` (a hedged copy let go) and
    ``release_held``."""

    def __init__(self) -> None:
        self._saved: dict[int, tuple[Callable, Callable | None]] = {}

    def attach(self, inst: Any, poke: Callable[[], None]) -> None:
        done, aborted, release = inst.on_done, inst.on_aborted, inst.release_held

        def on_done(req: Any) -> None:
            done(req)
            poke()

        def on_aborted(req: Any, now: int) -> None:
            aborted(req, now)
            poke()

        def release_held(req: Any, now: int) -> None:
            release(req, now)
            poke()

        self._saved[inst.index] = (done, aborted)
        inst.on_done, inst.release_held = on_done, release_held
        if aborted is not None:
            inst.on_aborted = on_aborted

    def detach(self, inst: Any) -> None:
        inst.on_done, inst.on_aborted = self._saved.pop(inst.index)
        del inst.release_held  # the class's method again
