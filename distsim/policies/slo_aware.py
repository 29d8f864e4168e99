"""SLO-aware admission: reject a request whose predicted TTFT on the best instance exceeds
``slo_margin`` x its TTFT SLO (its own, or the workload's default).

Prediction per instance: the prompt tokens queued ahead of it (instance-reported) plus its own,
served in budget-sized prefill chunks, each taking the latency model's time for a full-budget chunk:
ceil((queued + prompt) / budget) x step(budget). It ignores decode work sharing those steps, so it
errs optimistic under heavy decode load; the margin absorbs that."""

import math

import numpy as np

from distsim.errors import ConfigError
from distsim.instance.latency.base import StepShape
from distsim.policies.base import ADMISSIONS, Admission


@ADMISSIONS.register("slo_aware")
class SLOAware(Admission):
    reads_signals = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        margin = getattr(cfg, "slo_margin", None)
        margin = 1.0 if margin is None else margin
        if not margin > 0:
            raise ConfigError("policy.admission.slo_margin", f"must be > 0 (got {margin!r})")
        self.margin = float(margin)
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
