"""SLO-aware admission: reject a request whose predicted TTFT on the best instance exceeds
``slo_margin`` x its TTFT SLO (its own, or the workload's default).

Prediction per instance: the prompt tokens queued ahead of it (instance-reported) plus its own,
served in budget-sized prefill chunks, each taking the latency model's time for a full-budget chunk:
ceil((queued + prompt) / budget) x step(budget). It ignores decode work sharing those steps, so it
errs optimistic under heavy decode load; the margin absorbs that."""

import math
from dataclasses import dataclass

import numpy as np

from distsim.errors import ConfigError
from distsim.instance.latency.base import StepShape
from distsim.policies.base import ADMISSIONS, Admission, PolicyParams


@dataclass(frozen=True)
class SLOAwareParams(PolicyParams):
    slo_margin: float = 1.0  # reject when the predicted TTFT exceeds margin x the TTFT SLO

    def check(self, key: str) -> None:
        if not self.slo_margin > 0:
            raise ConfigError(f"{key}.slo_margin", f"must be > 0 (got {self.slo_margin!r})")


@ADMISSIONS.register("slo_aware")
class SLOAware(Admission):
    reads_signals = True

    Params = SLOAwareParams

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.margin = float(params.slo_margin)
        self.default_slo_ms = ctx.extra.get("default_ttft_slo_ms", math.inf)
        self._chunk_us = None

    def _chunks(self, view):
        if self._chunk_us is None:
            budget = view.facts["max_num_batched_tokens"]
            self._budget = budget.astype(np.float64)
            self._chunk_us = np.array(
                [m.step_us(StepShape(int(b), int(b) * (int(b) + 1) // 2, int(b), 0, 0)) for m, b in zip(view.step_models, budget)],
                dtype=np.float64,
            )
        return self._budget, self._chunk_us

    def admit(self, req, now, view) -> bool:
        slo = req.ttft_slo_ms if req.ttft_slo_ms is not None else self.default_slo_ms
        if not math.isfinite(slo):
            return True
        budget, chunk_us = self._chunks(view)
        predicted_us = np.ceil((view.queued_tokens() + req.prompt_tokens) / budget) * chunk_us
        return float(predicted_us.min()) <= self.margin * slo * 1000.0

    def members_changed(self, old, new) -> None:
        """The chunk times were per candidate: compute them again for the new ones."""
        super().members_changed(old, new)
        self._chunk_us = None
