"""Tenants and SLO classes: who sends each request, which class it is in, and what that implies.

Tenants get Zipf-skewed shares (or explicit ones); a request's SLO class is its tenant's fixed class or
a draw from the class shares. A value set on the tenant's profile wins over its class's, which wins over
the workload default; that holds for TTFT/TPOT objectives, priority and both length distributions.
Everything is resolved once into small (tenant x class) lookup tables so a block of requests is tagged
with a few numpy gathers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distsim.errors import ConfigError
from distsim.workload import checks
from distsim.workload.lengths import Sampler
from distsim.workload.schema import WorkloadConfig


def zipf_shares(n: int, s: float) -> np.ndarray:
    """Shares proportional to (i + 1) ** -s for i in 0..n-1, summing to 1."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -s
    return w / w.sum()


def shares_from(key: str, count: int, zipf_s, shares) -> np.ndarray:
    """Explicit relative ``shares`` (one per item) if given, else Zipf with exponent ``zipf_s``."""
    if shares is not None:
        values = checks.number_list(f"{key}.shares", shares)
        if len(values) != count:
            raise ConfigError(f"{key}.shares", f"needs {count} values (one each), got {len(values)}")
        w = np.asarray(values)
        if w.sum() <= 0.0:
            raise ConfigError(f"{key}.shares", "must not all be zero")
        return w / w.sum()
    return zipf_shares(count, checks.non_negative(f"{key}.zipf_s", zipf_s))


@dataclass
class Tags:
    """The tags of a block of requests (arrays of equal length)."""

    tenant: np.ndarray
    slo_class: list  # class names (str)
    ttft_ms: list
    tpot_ms: list
    priority: list
    input_idx: np.ndarray  # which input-length sampler each request uses
    output_idx: np.ndarray


class Tagger:
    """Draws tenants and classes and resolves their SLOs, priorities and length samplers."""

    # long: validates the tenant and class sections and fills the per-tenant, per-class tables in one pass;
    # the samplers must be created in this order (their index is each row's sampler), which one body keeps plain
    def __init__(self, cfg, key: str = "workload", *, lengths: bool = True):
        tcfg, scfg = cfg.tenants, cfg.slo
        self.count = checks.integer(f"{key}.tenants.count", tcfg.count, low=1)
        self.tenant_p = shares_from(f"{key}.tenants", self.count, tcfg.zipf_s, tcfg.shares)
        default_ttft = checks.positive(f"{key}.slo.ttft_ms", scfg.ttft_ms)
        default_tpot = checks.positive(f"{key}.slo.tpot_ms", scfg.tpot_ms)
        default_prio = checks.integer(f"{key}.slo.priority", scfg.priority)

        classes = list(scfg.classes) if scfg.classes else []
        if classes:
            names = []
            for i, c in enumerate(classes):
                name = c.name
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"{key}.slo.classes[{i}].name", "must be a non-empty string")
                if name in names:
                    raise ConfigError(f"{key}.slo.classes[{i}].name", f"duplicate class {name!r}")
                names.append(name)
            w = np.asarray(
                [checks.non_negative(f"{key}.slo.classes[{i}].share", c.share) for i, c in enumerate(classes)]
            )
            if w.sum() <= 0.0:
                raise ConfigError(f"{key}.slo.classes", "the class shares must not all be zero")
            self.class_p = w / w.sum()
        else:
            names = ["default"]
            self.class_p = np.ones(1)

        profiles = list(tcfg.profiles) if tcfg.profiles else []
        if len(profiles) > self.count:
            raise ConfigError(
                f"{key}.tenants.profiles", f"has {len(profiles)} entries but tenants.count is {self.count}"
            )

        # Samplers: index 0 is the workload default; classes and tenants with their own add more.
        self.lengths = lengths
        self.input_samplers: list[Sampler] = []
        self.output_samplers: list[Sampler] = []
        if lengths:
            schema = WorkloadConfig()
            self.input_samplers.append(Sampler(cfg.input_tokens, f"{key}.input_tokens", default=schema.input_tokens))
            self.output_samplers.append(Sampler(cfg.output_tokens, f"{key}.output_tokens", default=schema.output_tokens))

        def sampler(dist_cfg, k: str, pool: list[Sampler], fallback: int) -> int:
            if dist_cfg is None or not lengths:
                return fallback
            pool.append(Sampler(dist_cfg, k))
            return len(pool) - 1

        C = len(names)
        cls_ttft = [default_ttft] * C
        cls_tpot = [default_tpot] * C
        cls_prio = [default_prio] * C
        cls_in = [0] * C
        cls_out = [0] * C
        for i, c in enumerate(classes):
            k = f"{key}.slo.classes[{i}]"
            if c.ttft_ms is not None:
                cls_ttft[i] = checks.positive(f"{k}.ttft_ms", c.ttft_ms)
            if c.tpot_ms is not None:
                cls_tpot[i] = checks.positive(f"{k}.tpot_ms", c.tpot_ms)
            if c.priority is not None:
                cls_prio[i] = checks.integer(f"{k}.priority", c.priority)
            cls_in[i] = sampler(c.input_tokens, f"{k}.input_tokens", self.input_samplers, 0)
            cls_out[i] = sampler(c.output_tokens, f"{k}.output_tokens", self.output_samplers, 0)

        # Tables have one row per tenant plus a last row for tenants without a profile (trace ids).
        T = self.count
        self.fixed_class = np.full(T + 1, -1, dtype=np.int64)
        ttft = np.tile(np.asarray(cls_ttft, dtype=np.float64), (T + 1, 1))
        tpot = np.tile(np.asarray(cls_tpot, dtype=np.float64), (T + 1, 1))
        prio = np.tile(np.asarray(cls_prio, dtype=np.int64), (T + 1, 1))
        in_idx = np.tile(np.asarray(cls_in, dtype=np.int64), (T + 1, 1))
        out_idx = np.tile(np.asarray(cls_out, dtype=np.int64), (T + 1, 1))
        for t, p in enumerate(profiles):
            k = f"{key}.tenants.profiles[{t}]"
            if p.slo_class is not None:
                if p.slo_class not in names:
                    raise ConfigError(
                        f"{k}.slo_class", f"unknown class {p.slo_class!r}; classes: {', '.join(names)}"
                    )
                self.fixed_class[t] = names.index(p.slo_class)
            if p.ttft_ms is not None:
                ttft[t, :] = checks.positive(f"{k}.ttft_ms", p.ttft_ms)
            if p.tpot_ms is not None:
                tpot[t, :] = checks.positive(f"{k}.tpot_ms", p.tpot_ms)
            if p.priority is not None:
                prio[t, :] = checks.integer(f"{k}.priority", p.priority)
            if p.input_tokens is not None:
                in_idx[t, :] = sampler(p.input_tokens, f"{k}.input_tokens", self.input_samplers, 0)
            if p.output_tokens is not None:
                out_idx[t, :] = sampler(p.output_tokens, f"{k}.output_tokens", self.output_samplers, 0)
        self._ttft, self._tpot, self._prio, self._in, self._out = ttft, tpot, prio, in_idx, out_idx
        self._names = np.asarray(names, dtype=object)

    def tag(self, rng: np.random.Generator, n: int, tenant: np.ndarray | None = None) -> Tags:
        """Tags for ``n`` requests; ``tenant`` gives their tenants (a trace column) instead of drawing them."""
        if tenant is None:
            tenant = (
                rng.choice(self.count, size=n, p=self.tenant_p)
                if self.count > 1
                else np.zeros(n, dtype=np.int64)
            )
        row = np.where((tenant >= 0) & (tenant < self.count), tenant, self.count)
        if len(self.class_p) > 1:
            cls = rng.choice(len(self.class_p), size=n, p=self.class_p)
        else:
            cls = np.zeros(n, dtype=np.int64)
        fixed = self.fixed_class[row]
        cls = np.where(fixed >= 0, fixed, cls)
        return Tags(
            tenant=tenant,
            slo_class=self._names[cls].tolist(),
            ttft_ms=self._ttft[row, cls].tolist(),
            tpot_ms=self._tpot[row, cls].tolist(),
            priority=self._prio[row, cls].tolist(),
            input_idx=self._in[row, cls],
            output_idx=self._out[row, cls],
        )

    def lengths_for(self, rng: np.random.Generator, idx: np.ndarray, samplers: list[Sampler]) -> np.ndarray:
        """One length per request, each from the sampler ``idx`` names (one draw per sampler in use)."""
        if len(samplers) == 1:
            return samplers[0].sample(rng, len(idx))
        out = np.empty(len(idx), dtype=np.int64)
        for j, s in enumerate(samplers):
            mask = idx == j
            k = int(mask.sum())
            if k:
                out[mask] = s.sample(rng, k)
        return out
