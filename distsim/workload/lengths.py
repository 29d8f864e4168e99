"""Distributions for token lengths, session turn counts and think times (registry: length_dists.py).

A :class:`Sampler` wraps a distribution with the config's ``min``/``max`` clamps. Integer samplers
(token lengths, turns) round to the nearest integer and never go below 1; float samplers (think times)
never go below 0. Draws come in numpy blocks, so the per-request cost is a few array operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distsim import inputs
from distsim.errors import ConfigError, InputFileError
from distsim.inputs import excerpt
from distsim.workload import checks
from distsim.workload.length_dists import DISTS
from distsim.workload.paths import resolve_path
from distsim.workload.schema import DistConfig


class Dist:
    """A distribution of non-negative reals; ``sample`` returns ``n`` float64 draws."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(Dist):
    value: float

    def sample(self, rng, n):
        return np.full(n, self.value, dtype=np.float64)


@dataclass(frozen=True)
class Uniform(Dist):
    low: float
    high: float
    integer: bool

    def sample(self, rng, n):
        if self.integer:  # inclusive integer bounds
            return rng.integers(int(self.low), int(self.high) + 1, size=n).astype(np.float64)
        return rng.uniform(self.low, self.high, size=n)


@dataclass(frozen=True)
class LogNormal(Dist):
    mu: float
    sigma: float

    def sample(self, rng, n):
        return rng.lognormal(self.mu, self.sigma, size=n)


@dataclass(frozen=True)
class Exponential(Dist):
    mean: float

    def sample(self, rng, n):
        return rng.exponential(self.mean, size=n)


@dataclass(frozen=True)
class Poisson(Dist):
    """Counts with variance equal to the mean (InferMesh's output lengths): narrower than an exponential."""

    mean: float

    def sample(self, rng, n):
        return rng.poisson(self.mean, size=n).astype(np.float64)


@dataclass(frozen=True)
class TruncatedNormal(Dist):
    """A normal restricted to [lo, hi] by redrawing, so no mass piles up on the bounds."""

    mean: float
    std: float
    lo: float
    hi: float

    def sample(self, rng, n):
        out = rng.normal(self.mean, self.std, size=n)
        bad = (out < self.lo) | (out > self.hi)
        while bad.any():
            k = int(bad.sum())
            out[bad] = rng.normal(self.mean, self.std, size=k)
            bad = (out < self.lo) | (out > self.hi)
        return out


@dataclass(frozen=True)
class Empirical(Dist):
    """Resamples (with replacement) the values of one column of a file."""

    values: np.ndarray

    def sample(self, rng, n):
        return self.values[rng.integers(0, len(self.values), size=n)]


@DISTS.register("fixed")
def _fixed(cfg, key, integer, lo, hi):
    return Fixed(
        checks.non_negative(f"{key}.value", checks.required(f"{key}.value", cfg.value, "for dist=fixed"))
    )


@DISTS.register("uniform")
def _uniform(cfg, key, integer, lo, hi):
    low = checks.non_negative(f"{key}.low", checks.required(f"{key}.low", cfg.low, "for dist=uniform"))
    high = checks.non_negative(f"{key}.high", checks.required(f"{key}.high", cfg.high, "for dist=uniform"))
    if integer:
        low = float(checks.integer(f"{key}.low", low))
        high = float(checks.integer(f"{key}.high", high))
    if high < low:
        raise ConfigError(f"{key}.high", f"must be >= low ({low:g}) (got {high:g})")
    return Uniform(low, high, integer)


@DISTS.register("lognormal")
def _lognormal(cfg, key, integer, lo, hi):
    mu = checks.number(f"{key}.mu", checks.required(f"{key}.mu", cfg.mu, "for dist=lognormal"))
    sigma = checks.non_negative(
        f"{key}.sigma", checks.required(f"{key}.sigma", cfg.sigma, "for dist=lognormal")
    )
    return LogNormal(mu, sigma)


@DISTS.register("exponential")
def _exponential(cfg, key, integer, lo, hi):
    return Exponential(
        checks.positive(f"{key}.mean", checks.required(f"{key}.mean", cfg.mean, "for dist=exponential"))
    )


POISSON_MAX_MEAN = 1e12  # numpy's Poisson sampler refuses a mean near 2**63; no length comes near this


@DISTS.register("poisson")
def _poisson(cfg, key, integer, lo, hi):
    mean = checks.positive(f"{key}.mean", checks.required(f"{key}.mean", cfg.mean, "for dist=poisson"))
    if mean > POISSON_MAX_MEAN:
        raise ConfigError(f"{key}.mean", f"must be at most {POISSON_MAX_MEAN:g} for dist=poisson (got {cfg.mean!r})")
    return Poisson(mean)


@DISTS.register("normal")
def _normal(cfg, key, integer, lo, hi):
    mean = checks.number(f"{key}.mean", checks.required(f"{key}.mean", cfg.mean, "for dist=normal"))
    std = checks.non_negative(f"{key}.std", checks.required(f"{key}.std", cfg.std, "for dist=normal"))
    if std == 0.0:
        if not lo <= mean <= hi:
            raise ConfigError(f"{key}.mean", f"with std=0 must lie in [{lo:g}, {hi:g}] (got {mean:g})")
        return Fixed(mean)
    cdf = lambda x: 0.5 * (1.0 + math.erf((x - mean) / (std * math.sqrt(2.0))))  # noqa: E731
    if cdf(hi) - cdf(lo) < 1e-4:
        raise ConfigError(key, f"normal(mean={mean:g}, std={std:g}) has almost no mass in [{lo:g}, {hi:g}]")
    return TruncatedNormal(mean, std, lo, hi)


@DISTS.register("empirical")
def _empirical(cfg, key, integer, lo, hi):
    path = resolve_path(f"{key}.path", cfg.path)
    columns = list(inputs.read_csv_frame(path, nrows=0).columns)
    column = cfg.column
    if column is None:
        if len(columns) != 1:
            raise ConfigError(f"{key}.column", f"required: {path} has columns {', '.join(columns)}")
        column = columns[0]
    if column not in columns:
        raise ConfigError(
            f"{key}.column", f"no column {excerpt(column)} in {path} (columns: {', '.join(columns)})"
        )
    import pandas as pd  # here, not at the top: a run without an empirical CSV never imports pandas

    raw = inputs.read_csv_frame(path, usecols=[column])[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        i = int(bad[0])
        raise InputFileError(
            path, f"column {excerpt(column)}: not a non-negative number: {excerpt(raw.iloc[i])}", line=i + 2
        )
    if len(values) == 0:
        raise InputFileError(path, f"column {excerpt(column)} has no values")
    return Empirical(values)


# the keys each built-in distribution reads besides dist, min and max (the others must stay unset)
READS = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "lognormal": ("mu", "sigma"),
    "exponential": ("mean",),
    "normal": ("mean", "std"),
    "poisson": ("mean",),
    "empirical": ("path", "column"),
}


class Sampler:
    """A distribution from config plus clamps. ``key`` is the dotted config path for messages;
    ``default`` the schema's DistConfig for that key (null: every field null but ``dist``), so that only
    what a config sets and the distribution does not read warns."""

    def __init__(self, cfg, key: str, *, integer: bool = True, default=None):
        build = DISTS.get(cfg.dist, f"{key}.dist")
        if cfg.dist in READS:
            checks.warn_unread(cfg, key, ("dist", "min", "max", *READS[cfg.dist]),
                               f"dist {cfg.dist!r} does not use it", default or DistConfig())
        floor = 1.0 if integer else 0.0
        lo = floor if cfg.min is None else max(floor, checks.number(f"{key}.min", cfg.min))
        hi = math.inf if cfg.max is None else checks.number(f"{key}.max", cfg.max)
        if hi < lo:
            raise ConfigError(f"{key}.max", f"must be >= min ({lo:g}) (got {cfg.max!r})")
        self.key = key
        self.integer = integer
        self.lo = lo
        self.hi = hi
        self.dist = build(cfg, key, integer, lo, hi)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws, clamped to [min, max]; int64 for integer samplers, else float64."""
        x = self.dist.sample(rng, n)
        if self.integer:
            x = np.rint(x)
        np.clip(x, self.lo, self.hi, out=x)
        return x.astype(np.int64) if self.integer else x


class Buffered:
    """One value at a time from a sampler, drawn in blocks (for per-event draws such as think times)."""

    def __init__(self, sampler: Sampler, rng: np.random.Generator, block: int = 1024):
        self._sampler = sampler
        self._rng = rng
        self._block = block
        self._buf: list = []
        self._i = 0

    def next(self):
        if self._i >= len(self._buf):
            self._buf = self._sampler.sample(self._rng, self._block).tolist()
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return v
