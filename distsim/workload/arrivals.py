"""Arrival processes (registered by ``workload.arrival.process`` in arrival_processes.py).

Each process is an object that hands out absolute arrival times in blocks, continuing where the last
block ended. Times are float64 seconds accumulated from t = 0 (cumulative sums carried across blocks)
and rounded to integer microseconds only once, by the caller: rounding each gap instead would drift
(1/3 s gaps rounded to whole microseconds lose 1/3 us per request).
"""

from __future__ import annotations

import numpy as np

from distsim.errors import ConfigError
from distsim.workload import checks
from distsim.workload.arrival_processes import PROCESSES
from distsim.workload.schema import ArrivalConfig


class ArrivalProcess:
    """Hands out arrival times (seconds, non-decreasing) ``n`` at a time; fewer means no more arrivals."""

    def next_times(self, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def mean_rate(self) -> float:
        """The long-run arrival rate in requests per second."""
        raise NotImplementedError  # pragma: no cover


def _rate(cfg, key: str) -> float:
    return checks.positive(
        f"{key}.rate_rps", checks.required(f"{key}.rate_rps", cfg.rate_rps, f"for process={cfg.process}")
    )


class _Renewal(ArrivalProcess):
    """Independent identically distributed gaps, summed in float seconds."""

    def __init__(self, rng: np.random.Generator, rate: float):
        self._rng = rng
        self._rate = rate
        self._t = 0.0

    def _gaps(self, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def next_times(self, n):
        times = np.cumsum(self._gaps(n))
        times += self._t
        if n:
            self._t = float(times[-1])
        return times

    def mean_rate(self):
        return self._rate


class Poisson(_Renewal):
    def _gaps(self, n):
        return self._rng.exponential(1.0 / self._rate, size=n)


class Gamma(_Renewal):
    """Gamma gaps with mean 1/rate and coefficient of variation ``cv`` (cv=1 is Poisson)."""

    def __init__(self, rng, rate, cv):
        super().__init__(rng, rate)
        self._shape = 1.0 / (cv * cv)
        self._scale = 1.0 / (rate * self._shape)

    def _gaps(self, n):
        return self._rng.gamma(self._shape, self._scale, size=n)


class Constant(ArrivalProcess):
    """Arrival k (from 1) at exactly k / rate: computed, not summed, so there is no drift at all."""

    def __init__(self, rate: float):
        self._rate = rate
        self._k = 0

    def next_times(self, n):
        ks = np.arange(self._k + 1, self._k + n + 1, dtype=np.float64)
        self._k += n
        return ks / self._rate

    def mean_rate(self):
        return self._rate


class MMPP(ArrivalProcess):
    """Markov-modulated Poisson: state i emits at ``rates[i]`` for an exponential dwell of mean ``dwell[i]``.

    Starts in state 0; on leaving a state it jumps to one of the others uniformly at random, so the
    long-run share of time in state i is dwell[i] / sum(dwell) and the long-run rate the dwell-weighted
    mean of the rates. Each sojourn is filled with a Poisson count of uniform arrival times.
    """

    def __init__(self, rng, rates, dwell):
        self._rng = rng
        self._rates = np.asarray(rates, dtype=np.float64)
        self._dwell = np.asarray(dwell, dtype=np.float64)
        self._state = 0
        self._t = 0.0
        self._pending = np.empty(0)

    def _sojourn(self) -> np.ndarray:
        rng, i = self._rng, self._state
        length = rng.exponential(self._dwell[i])
        k = rng.poisson(self._rates[i] * length)
        times = self._t + np.sort(rng.uniform(0.0, length, size=k))
        self._t += length
        m = len(self._rates)
        if m > 1:
            j = int(rng.integers(0, m - 1))
            self._state = j if j < i else j + 1
        return times

    def next_times(self, n):
        parts = [self._pending]
        have = len(self._pending)
        while have < n:
            s = self._sojourn()
            parts.append(s)
            have += len(s)
        allt = np.concatenate(parts)
        self._pending = allt[n:]
        return allt[:n]

    def mean_rate(self):
        return float((self._rates * self._dwell).sum() / self._dwell.sum())


class Schedule(ArrivalProcess):
    """A Poisson process whose rate is piecewise constant over time (a diurnal curve, a spike).

    Time change: unit-rate exponential sums are mapped through the inverse of the cumulative rate.
    With ``repeat`` the segments loop; without it the last segment's rate holds forever (a zero last
    rate ends the arrivals).
    """

    def __init__(self, rng, rates, durations, repeat):
        self._rng = rng
        self._rates = np.asarray(rates, dtype=np.float64)
        self._starts = np.concatenate([[0.0], np.cumsum(durations)])  # segment start times
        self._cum = np.concatenate([[0.0], np.cumsum(self._rates * np.asarray(durations))])  # mass at starts
        self._period = float(self._starts[-1])
        self._mass = float(self._cum[-1])
        self._repeat = repeat
        self._e = 0.0  # unit-rate clock
        self._done = False

    def _invert(self, e: np.ndarray) -> np.ndarray:
        if self._repeat:
            cycles = np.floor(e / self._mass)
            e = e - cycles * self._mass
            base = cycles * self._period
        else:
            base = np.zeros_like(e)
        # the segment holding each mass value; zero-rate segments have no mass, so side="right" skips them
        j = np.searchsorted(self._cum, e, side="right") - 1
        j = np.minimum(j, len(self._rates) - 1)
        t = self._starts[j] + (e - self._cum[j]) / self._rates[j]
        return base + t

    def next_times(self, n):
        if self._done:
            return np.empty(0)
        e = self._e + np.cumsum(self._rng.exponential(1.0, size=n))
        self._e = float(e[-1]) if n else self._e
        if not self._repeat and self._rates[-1] == 0.0:
            keep = e < self._mass
            if not keep.all():
                self._done = True
                e = e[keep]
        return self._invert(e)

    def mean_rate(self):
        if self._repeat:
            return self._mass / self._period
        return float(self._rates[-1])


@PROCESSES.register("poisson")
def _poisson(cfg, key, rng):
    return Poisson(rng, _rate(cfg, key))


@PROCESSES.register("gamma")
def _gamma(cfg, key, rng):
    cv = checks.positive(f"{key}.cv", checks.required(f"{key}.cv", cfg.cv, "for process=gamma"))
    return Gamma(rng, _rate(cfg, key), cv)


@PROCESSES.register("constant")
def _constant(cfg, key, rng):
    return Constant(_rate(cfg, key))


@PROCESSES.register("mmpp")
def _mmpp(cfg, key, rng):
    rates = checks.number_list(
        f"{key}.rates_rps", checks.required(f"{key}.rates_rps", cfg.rates_rps, "for process=mmpp")
    )
    dwell = checks.number_list(
        f"{key}.dwell_s", checks.required(f"{key}.dwell_s", cfg.dwell_s, "for process=mmpp"), strict=True
    )
    if len(rates) != len(dwell):
        raise ConfigError(
            f"{key}.dwell_s", f"needs one value per state: {len(rates)} rates but {len(dwell)} dwell times"
        )
    if max(rates) <= 0.0:
        raise ConfigError(f"{key}.rates_rps", "at least one state needs a rate > 0")
    return MMPP(rng, rates, dwell)


@PROCESSES.register("schedule")
def _schedule(cfg, key, rng):
    rates = checks.number_list(
        f"{key}.rates_rps", checks.required(f"{key}.rates_rps", cfg.rates_rps, "for process=schedule")
    )
    durations = checks.number_list(
        f"{key}.durations_s",
        checks.required(f"{key}.durations_s", cfg.durations_s, "for process=schedule"),
        strict=True,
    )
    if len(rates) != len(durations):
        raise ConfigError(
            f"{key}.durations_s",
            f"needs one value per segment: {len(rates)} rates but {len(durations)} durations",
        )
    if max(rates) <= 0.0:
        raise ConfigError(f"{key}.rates_rps", "at least one segment needs a rate > 0")
    return Schedule(rng, rates, durations, bool(cfg.repeat))


# the keys each built-in process reads besides ``process`` (the others must stay unset)
READS = {
    "poisson": ("rate_rps",),
    "gamma": ("rate_rps", "cv"),
    "constant": ("rate_rps",),
    "mmpp": ("rates_rps", "dwell_s"),
    "schedule": ("rates_rps", "durations_s", "repeat"),
}


def warn_unread_arrival(cfg, key: str) -> None:
    """Warn about keys of ``workload.arrival`` that its process does not read (the schema's defaults aside)."""
    if cfg.process in READS:
        checks.warn_unread(cfg, key, ("process", *READS[cfg.process]), f"process {cfg.process!r} does not use it",
                           ArrivalConfig())


def build_arrivals(cfg, key: str, rng: np.random.Generator) -> ArrivalProcess:
    """The arrival process ``cfg`` (the ``workload.arrival`` node) describes, drawing from ``rng``."""
    return PROCESSES.get(cfg.process, f"{key}.process")(cfg, key, rng)
