"""The profiler's backends: the few array operations a dense model's forward pass needs, and a timer.

A backend holds arrays of its own kind (numpy arrays, torch tensors) and times a closure over them:
warm-up calls, one call to size the repetitions, then repetitions until ``target_s`` (at least
:data:`MIN_REPS`, at most :data:`MAX_REPS`), each timed alone after the device is idle; the median is the
measurement (as ``../shared/data/h100_steps`` times its steps). Backends register by name
(:data:`BACKENDS`); a backend whose library is missing says how to install it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from distsim.errors import UserError
from distsim.registry import Registry

MIN_REPS = 5
MAX_REPS = 40
WARMUP = 2


@dataclass(frozen=True)
class Timing:
    """One measurement: the median and the 10th and 90th percentiles of the repetitions, in us."""

    median_us: float
    p10_us: float
    p90_us: float
    repetitions: int


@dataclass(frozen=True)
class DeviceInfo:
    """What the backend runs on: a device name (a catalog GPU's when it is one), its memory, how many
    such devices the backend sees, the dtype it computes in and its bytes per element."""

    name: str
    memory_bytes: int
    count: int
    dtype: str  # a config.json torch_dtype: float32, bfloat16
    dtype_bytes: int


class Backend(Protocol):
    """The operations :mod:`distsim.profile.forward` and :mod:`distsim.profile.micro` use."""

    name: str

    def device(self) -> DeviceInfo: ...

    def randn(self, shape: Sequence[int], scale: float = 1.0) -> Any: ...

    def matmul(self, x: Any, w: Any) -> Any: ...

    def rmsnorm(self, x: Any) -> Any: ...

    def add(self, x: Any, y: Any) -> Any: ...

    def silu_mul(self, gate_up: Any) -> Any: ...

    def prefill_attention(self, q: Any, k: Any, v: Any) -> Any: ...

    def decode_attention(self, q: Any, k: Any, v: Any) -> Any: ...

    def write_kv(self, cache: Any, new: Any, at: int) -> None: ...

    def index(self, rows: Sequence[int]) -> Any: ...

    def zeros(self, shape: Sequence[int]) -> Any: ...

    def heads(self, x: Any, heads: int, head_dim: int) -> Any: ...

    def merge(self, x: Any) -> Any: ...

    def concat(self, parts: Sequence[Any]) -> Any: ...

    def free_bytes(self) -> int: ...

    def argmax(self, logits: Any) -> Any: ...

    def topk(self, logits: Any, k: int) -> tuple[Any, Any]: ...

    def combine(self, rows: Any, weights: Any) -> Any: ...

    def softmax_sample(self, logits: Any, seed: int) -> Any: ...

    def sync(self) -> None: ...

    def time(self, fn: Callable[[], Any], target_s: float) -> Timing: ...


BACKENDS: Registry[Callable[[], Backend]] = Registry("profiler backend", "--backend", "distsim.profile.backends")


def make_backend(name: str) -> Backend:
    """The backend registered as ``name``; an unknown name or a missing library is one UserError."""
    from distsim.errors import ConfigError

    try:
        factory = BACKENDS[name]
    except ConfigError as err:
        raise UserError(str(err)) from None
    return factory()


def repeat_timing(call: Callable[[], float], target_s: float) -> Timing:
    """Time ``call`` (it runs the closure once and returns its time in us): :data:`WARMUP` calls, one to
    size the repetitions, then ``target_s`` worth of them within [:data:`MIN_REPS`, :data:`MAX_REPS`]."""
    for _ in range(WARMUP):
        call()
    first = max(call(), 1e-3)
    reps = int(min(MAX_REPS, max(MIN_REPS, target_s * 1e6 / first)))
    samples = np.array([call() for _ in range(reps)], dtype=np.float64)
    p10, med, p90 = np.percentile(samples, [10, 50, 90])
    return Timing(float(med), float(p10), float(p90), reps)


def wall_timer(fn: Callable[[], Any], sync: Callable[[], None]) -> Callable[[], float]:
    """A call that runs ``fn`` once between two device syncs and returns its wall time in us."""

    def call() -> float:
        sync()
        start = time.perf_counter_ns()
        fn()
        sync()
        return (time.perf_counter_ns() - start) / 1e3

    return call
