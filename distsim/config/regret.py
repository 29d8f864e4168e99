"""``regret.*``: fork-and-replay counterfactual regret of a single run's routing decisions (distsim.regret).

Off by default (``samples`` 0): the run is then exactly what it would be without this section. With
``samples`` K > 0, ``python -m distsim`` replays K routing decisions of the run, each on every alternative
instance, for ``horizon_s`` simulated seconds, and writes regret.csv, regret_alternatives.csv and regret.json
beside the run's own files (which stay byte-identical).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distsim.validators import integer, positive

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass
class RegretConfig:
    samples: int = 0  # routing decisions to replay on every alternative instance (0: off)
    horizon_s: float = 30.0  # each replay runs this long after its decision; later tokens count as censored
    # true: every later decision in a replay is the one the run made (only the sampled one differs: all else
    # equal); false: the policy makes them, reacting to the changed decision
    pin_later: bool = False


@dataclass(frozen=True)
class RegretSettings:
    samples: int
    horizon_us: int
    pin_later: bool = False

    @property
    def enabled(self) -> bool:
        return self.samples > 0


def regret_settings(cfg: DictConfig) -> RegretSettings:
    """``regret.*`` checked, naming the key."""
    samples = integer("regret.samples", cfg.regret.samples, low=0)
    horizon_s = positive("regret.horizon_s", cfg.regret.horizon_s)
    return RegretSettings(samples, max(1, int(round(horizon_s * 1e6))), bool(cfg.regret.pin_later))
