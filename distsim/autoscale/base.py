"""The autoscaler interface: a scaler looks at one pool and says how many replicas it wants.

A kind is a :class:`Scaler` subclass with its typed parameters (a frozen :class:`ScalerParams` dataclass
whose fields are keys under the pool's ``autoscale``, null unless set, like a routing policy's). Its
``desired`` reads a :class:`distsim.autoscale.probe.PoolProbe` (replica counts, signals per serving
replica, recent completions) and returns a replica count; the controller clamps it to [min, max] and
applies the scale-down stabilisation, so a kind states only its rule. A kind never reads an instance:
what it sees is what a metrics pipeline or the gateway would report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from distsim.policies.base import PolicyParams

if TYPE_CHECKING:
    from distsim.autoscale.probe import PoolProbe

# what target_utilization can track, per serving replica: the instance-reported ones come from the
# signal board (so the signals config's scrape interval and delay apply); outstanding is router-owned
SCALING_SIGNALS = ("kv_utilization", "queue_depth", "running", "outstanding")


@dataclass(frozen=True)
class ScalerParams(PolicyParams):
    """A kind's own parameters; ``check(key)`` names ``key.field``; ``check_limits`` sees the pool's
    min and max (a scheduled count outside them is a mistake)."""

    def check_limits(self, key: str, low: int, high: int) -> None:
        return None


class Scaler:
    """One pool's scaling rule."""

    Params: ClassVar[type[ScalerParams]] = ScalerParams
    reads_completions: ClassVar[bool] = False  # reads the requests completed since the last evaluation

    def __init__(self, params: Any, initial: int, rng: np.random.Generator | None = None):
        self.params = params
        self.initial = initial  # the pool's count: replicas serving at the start
        self.rng = rng  # the pool's own stream ("autoscale/<pool>"), for a kind that draws (none built in does)

    def desired(self, probe: PoolProbe) -> int:
        """The replicas (serving plus provisioning) the pool should have now, before min/max and the
        scale-down stabilisation."""
        raise NotImplementedError

    def wake_times_us(self) -> tuple[int, ...]:
        """Instants at which to evaluate besides every interval (a schedule's change points)."""
        return ()
