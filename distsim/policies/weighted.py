"""Weighted scoring (llm-d's scheduler): each scorer gives every instance a score in [0, 1]; the
weights are normalised; the highest total wins, ties broken from the router's stream. Defaults
follow llm-d: prefix_affinity 3, queue_depth 2, kv_utilization 2. Scores are numpy vectors over the
candidates, so a decision costs a few array operations whatever the cluster size."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distsim.errors import ConfigError
from distsim.policies.base import ROUTERS, Router
from distsim.policies.choice import pick_max
from distsim.policies.prefix_affinity import PrefixParams
from distsim.policies.scorers import SCORERS

DEFAULT_WEIGHTS = {"prefix_affinity": 3.0, "queue_depth": 2.0, "kv_utilization": 2.0}


@dataclass(frozen=True)
class WeightedParams(PrefixParams):
    scorers: dict[str, float] | None = None  # scorer name -> weight ({} or None: llm-d's defaults)

    def weights(self) -> dict[str, float]:
        return dict(self.scorers) if self.scorers else dict(DEFAULT_WEIGHTS)

    def check(self, key: str) -> None:
        super().check(key)
        weights = self.weights()
        for name, w in weights.items():
            SCORERS.get(name)  # unknown names list the known ones
            if w is None or not math.isfinite(w) or w < 0:
                raise ConfigError(f"{key}.scorers.{name}", f"weight must be a finite number >= 0 (got {w!r})")
        if sum(weights.values()) <= 0:
            raise ConfigError(f"{key}.scorers", "weights must not all be zero")


@ROUTERS.register("weighted")
class Weighted(Router):
    Params = WeightedParams
    uses_prefix_index = True

    def __init__(self, params: WeightedParams, ctx):
        super().__init__(params, ctx)
        weights = params.weights()
        total = sum(weights.values())
        items = sorted((name, w) for name, w in weights.items() if w > 0)
        self.scorers = [(SCORERS.get(name)(params), w / total) for name, w in items]
        self.reads_signals = any(s.reads_signals for s, _ in self.scorers)
        self._total: np.ndarray | None = None
        self._rest = None  # (request, view, scores, positions) whose totals are still bounds, not exact

    @classmethod
    def reads_prefix_index(cls, params: WeightedParams) -> bool:
        return params.weights().get("prefix_affinity", 0) > 0

    def route(self, req, view) -> int:
        parts = []
        loose = []
        total = None
        for scorer, w in self.scorers:
            score, where = scorer.bound(req, view)
            parts.append(score)
            # the first weighted score is the sum so far (0.0 + x == x: scores are never -0.0), one copy less;
            # a score the same for every candidate (a float) adds one float, and 0.0 nothing
            if total is None:
                total = np.full(view.n, score * w) if type(score) is float else np.multiply(score, w, dtype=np.float64)
            elif type(score) is not float or score:
                total += w * score
            if where is not None:
                loose.append((len(parts) - 1, where))
        self._total = total
        self._rest = (parts, loose) if loose else None
        if not loose:
            return pick_max(total, self.ctx.rng)
        # ``total`` is at least the true total at the loose positions and exact elsewhere. Make the best
        # position exact until it stays best; then only positions tied with it can tie in truth, and those
        # that fall below it drop out: the winner and its ties (the random draw) are the true ones.
        first = int(total.argmax())
        while self._make_exact(first):
            first = int(total.argmax())
        ties = (total == total[first]).nonzero()[0]
        if ties.size == 1:
            return first
        fell = False
        for _, where in loose:
            for p in where.among(ties).tolist():
                fell = self._make_exact(p) or fell
        if fell:
            ties = (total == total[first]).nonzero()[0]
        if ties.size == 1:
            return first
        return int(ties[self.ctx.rng.integers(ties.size)])

    def _make_exact(self, p: int) -> bool:
        """Make ``total[p]`` the true total where a bound exceeded it; True when it changed. The same sum,
        in the same order, as the vector one, in float64 (so the same float)."""
        parts, loose = self._rest
        fixed = {}
        for j, where in loose:
            value = where.exact(p)
            if value is not None:
                fixed[j] = value
        if not fixed:
            return False
        value = 0.0
        for j, ((_, w), score) in enumerate(zip(self.scorers, parts)):
            x = fixed[j] if j in fixed else score if type(score) is float else float(score[p])
            value = x * w if j == 0 else value + w * x
        changed = value != self._total[p]
        self._total[p] = value
        return changed

    @property
    def last_scores(self) -> np.ndarray | None:
        """The last decision's totals, every one exact (read right after ``route``, before time moves on)."""
        if self._rest is not None:
            for _, where in self._rest[1]:
                for p in where.positions().tolist():
                    self._make_exact(p)
            self._rest = None
        return self._total
