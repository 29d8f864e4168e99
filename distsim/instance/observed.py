"""An instance that tells listeners of each step it completes: the builder's choice when someone listens.

Why a subclass chosen when the instance is built (docs/STYLE round two: a behaviour picked at construction,
observers on a list the object owns): a run that nobody observes builds plain :class:`Instance` objects and
pays nothing per step, not even a check for listeners; a run with a timeline
(the metrics package's ``timeline``) builds these. A listener reads, never writes: the simulation is the same
either way (tests/test_timeline.py compares the outputs with and without).
"""

from __future__ import annotations

from collections.abc import Callable

from distsim.instance.instance import Instance
from distsim.instance.plan import StepPlan

# listener(instance, plan, now): ``plan`` is the step, or fast-forwarded run of decode steps, that ends at
# ``now``, before it is applied (its ``begin_us``, ``steps``, ``decoders``, ``chunks`` and, for a run, the
# end time of each of its first ``steps`` steps in ``ends_us``)
StepListener = Callable[[Instance, StepPlan, int], None]


class ObservedInstance(Instance):
    """An :class:`Instance` whose ``step_listeners`` hear of every step or run as it ends (the horizon's
    settling included), with exactly the steps the instance's counters then count."""

    __slots__ = ("step_listeners",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_listeners: list[StepListener] = []

    def _apply_plan(self, now: int) -> None:
        for listener in self.step_listeners:
            listener(self, self.plan, now)
        super()._apply_plan(now)
