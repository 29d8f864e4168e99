"""The numpy backend: real timings of numpy's matmuls and attention in float32 on the CPU.

It needs nothing beyond the project's own dependencies, so CI runs the whole profiler with it on tiny
shapes (tests/test_profile.py); its figures describe this CPU, not a GPU. It times one CPU thread:
OpenBLAS's threads, on a machine whose cores other work shares, made a 128 x 128 matmul take 30 ms
instead of 30 us (measured on this project's 2-core machine), so it sets OpenBLAS to one thread where
it can (:func:`one_blas_thread`, as threadpoolctl does), and the device's name says whether it did.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from distsim.profile.backend import BACKENDS, DeviceInfo, Timing, repeat_timing, wall_timer


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of the host's memory (/proc/meminfo where there is one)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            fields = dict(line.split(":", 1) for line in fh)
        return total, int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return total, total // 2


# OpenBLAS's thread setter under the names its builds export (numpy's wheels: scipy-openblas, 64-bit ints)
SET_THREADS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_", "openblas_set_num_threads")


def one_blas_thread() -> bool:
    """Set every loaded OpenBLAS to one thread; False when none was found (another BLAS, no /proc)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            libs = sorted({w for line in fh for w in line.split() if "openblas" in w.lower() and ".so" in w})
    except OSError:
        return False
    done = False
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in SET_THREADS:
            if hasattr(lib, name):
                getattr(lib, name)(1)
                done = True
                break
    return done


class NumpyBackend:
    """float32 numpy arrays; weights from a fixed seed (timings do not depend on the values)."""

    name = "numpy"
    graphs = False

    def __init__(self, ranks: int = 1) -> None:
        self._rng = np.random.default_rng(0)
        self.threads = "1 BLAS thread" if one_blas_thread() else "BLAS threads as found"
        self.ranks = ranks  # CPU processes the all-reduce runs over (1: none)

    def device(self) -> DeviceInfo:
        cpu = platform.processor() or platform.machine() or "cpu"
        return DeviceInfo(f"CPU {cpu} (numpy {np.__version__}, {self.threads})", host_memory()[0], self.ranks, "float32", 4)

    def all_reduce(self, sizes: Sequence[int], target_s: float) -> list[dict]:
        """All-reduce by size over :attr:`ranks` CPU processes (distsim.profile.collectives)."""
        from distsim.profile.collectives import host_all_reduce_rows

        return host_all_reduce_rows(self.ranks, sizes, target_s)

    def free_bytes(self) -> int:
        return host_memory()[1]

    def randn(self, shape: Sequence[int], scale: float = 1.0) -> Any:
        return (self._rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(scale)).astype(np.float32)

    def zeros(self, shape: Sequence[int]) -> Any:
        return np.zeros(tuple(shape), dtype=np.float32)

    def matmul(self, x: Any, w: Any) -> Any:
        return x @ w

    def rmsnorm(self, x: Any) -> Any:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-5))

    def add(self, x: Any, y: Any) -> Any:
        return x + y

    def silu_mul(self, gate_up: Any) -> Any:
        gate, up = np.split(gate_up, 2, axis=-1)
        return gate / (1.0 + np.exp(-gate)) * up

    def heads(self, x: Any, heads: int, head_dim: int) -> Any:
        """[n, heads x head_dim] -> [heads, n, head_dim]."""
        return x.reshape(x.shape[0], heads, head_dim).transpose(1, 0, 2)

    def merge(self, x: Any) -> Any:
        """[heads, n, head_dim] -> [n, heads x head_dim]."""
        return x.transpose(1, 0, 2).reshape(x.shape[1], -1)

    def index(self, rows: Sequence[int]) -> Any:
        return np.asarray(rows, dtype=np.int64)

    def concat(self, parts: Sequence[Any]) -> Any:
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def write_kv(self, cache: Any, new: Any, at: int) -> None:
        cache[..., at : at + new.shape[-2], :] = new

    def prefill_attention(self, q: Any, k: Any, v: Any) -> Any:
        """q [Hq, n, d] over k, v [Hkv, c, d], bottom-right causal (query i sees keys up to c - n + i)."""
        hq, n, d = q.shape
        hkv, c, _ = k.shape
        g = q.reshape(hkv, hq // hkv, n, d)
        scores = np.einsum("hgnd,hcd->hgnc", g, k) / np.float32(np.sqrt(d))
        scores = np.where(np.tri(n, c, c - n, dtype=bool), scores, np.float32(-np.inf))
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        return np.einsum("hgnc,hcd->hgnd", p, v).reshape(hq, n, d)

    def decode_attention(self, q: Any, k: Any, v: Any) -> Any:
        """q [B, Hq, d] over k, v [B, Hkv, C, d] -> [B, Hq x d]."""
        b, hq, d = q.shape
        hkv = k.shape[1]
        g = q.reshape(b, hkv, hq // hkv, d)
        scores = np.einsum("bhgd,bhcd->bhgc", g, k) / np.float32(np.sqrt(d))
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        return np.einsum("bhgc,bhcd->bhgd", p, v).reshape(b, hq * d)

    def argmax(self, logits: Any) -> Any:
        return logits.argmax(axis=-1)

    def topk(self, logits: Any, k: int) -> tuple[Any, Any]:
        """A MoE router's top-k: each row's k largest logits' experts and their softmax over the k."""
        ids = np.argpartition(logits, -k, axis=-1)[:, -k:]
        top = np.take_along_axis(logits, ids, axis=-1)
        e = np.exp(top - top.max(axis=-1, keepdims=True))
        return ids, e / e.sum(axis=-1, keepdims=True)

    def combine(self, rows: Any, weights: Any) -> Any:
        """Each token's k expert rows ([T x k, H], token-major) summed by its weights [T, k]."""
        t, k = weights.shape
        return np.einsum("tkh,tk->th", rows.reshape(t, k, -1), weights)

    def softmax_sample(self, logits: Any, seed: int) -> Any:
        """Temperature sampling (temperature 1) by the Gumbel-max trick over the softmax's logits."""
        gumbel = np.random.default_rng(seed).gumbel(size=logits.shape).astype(np.float32)
        return (logits + gumbel).argmax(axis=-1)

    def sync(self) -> None:
        return None

    def time(self, fn: Callable[[], Any], target_s: float) -> Timing:
        return repeat_timing(wall_timer(fn, self.sync), target_s)


@BACKENDS.register("numpy")
def numpy_backend() -> NumpyBackend:
    return NumpyBackend()
