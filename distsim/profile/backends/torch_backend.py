"""The PyTorch backend: CUDA when a GPU is present (bfloat16, steps replayed from a CUDA graph and timed
by CUDA events, as ``../shared/data/h100_steps`` times its steps), else the CPU (float32, wall clock).

PyTorch is the profiler's optional extra (``pip install 'distsim[profile]'``), never a dependency of
the project or its tests: its Linux wheels pull gigabytes of CUDA libraries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from distsim.errors import UserError
from distsim.profile.backend import BACKENDS, DeviceInfo, Timing, repeat_timing, wall_timer

INSTALL = "the torch backend needs PyTorch: pip install 'distsim[profile]' (or pip install torch)"


class TorchBackend:
    """torch tensors on ``cuda:0`` (bfloat16) or the CPU (float32)."""

    name = "torch"

    def __init__(self, torch: Any, device: str | None = None) -> None:
        self.torch = torch
        self.dev = torch.device(device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
        self.cuda = self.dev.type == "cuda"
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        self.graphs = self.cuda  # CUDA graphs when capture works (a closure that cannot be captured runs eagerly)
        if not self.cuda:  # one thread, as the numpy backend: a shared CPU's thread pool makes timings jump
            torch.set_num_threads(1)
        self._gen = torch.Generator(device=self.dev).manual_seed(0)

    def device(self) -> DeviceInfo:
        t = self.torch
        if self.cuda:
            props = t.cuda.get_device_properties(self.dev)
            return DeviceInfo(props.name, int(props.total_memory), t.cuda.device_count(), "bfloat16", 2)
        from distsim.profile.backends.numpy_backend import host_memory

        return DeviceInfo(f"CPU (torch {t.__version__}, 1 thread)", host_memory()[0], 1, "float32", 4)

    def free_bytes(self) -> int:
        if self.cuda:
            return int(self.torch.cuda.mem_get_info(self.dev)[0])
        from distsim.profile.backends.numpy_backend import host_memory

        return host_memory()[1]

    def randn(self, shape: Sequence[int], scale: float = 1.0) -> Any:
        x = self.torch.randn(tuple(shape), generator=self._gen, device=self.dev, dtype=self.dtype)
        return x.mul_(scale)

    def zeros(self, shape: Sequence[int]) -> Any:
        return self.torch.zeros(tuple(shape), device=self.dev, dtype=self.dtype)

    def matmul(self, x: Any, w: Any) -> Any:
        return x @ w

    def rmsnorm(self, x: Any) -> Any:
        return x * self.torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)

    def add(self, x: Any, y: Any) -> Any:
        return x + y

    def silu_mul(self, gate_up: Any) -> Any:
        gate, up = gate_up.chunk(2, dim=-1)
        return self.torch.nn.functional.silu(gate) * up

    def heads(self, x: Any, heads: int, head_dim: int) -> Any:
        return x.reshape(x.shape[0], heads, head_dim).transpose(0, 1)

    def merge(self, x: Any) -> Any:
        return x.transpose(0, 1).reshape(x.shape[1], -1)

    def index(self, rows: Sequence[int]) -> Any:
        return self.torch.tensor(list(rows), dtype=self.torch.long, device=self.dev)

    def concat(self, parts: Sequence[Any]) -> Any:
        return parts[0] if len(parts) == 1 else self.torch.cat(list(parts), dim=0)

    def write_kv(self, cache: Any, new: Any, at: int) -> None:
        cache[..., at : at + new.shape[-2], :] = new

    def prefill_attention(self, q: Any, k: Any, v: Any) -> Any:
        """q [Hq, n, d] over k, v [Hkv, c, d], bottom-right causal: flash attention's causal form when
        nothing is cached (c == n), else an explicit mask."""
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        n, c = q.shape[1], k.shape[1]
        if c == n:
            return sdpa(q[None], k[None], v[None], is_causal=True, enable_gqa=True)[0]
        mask = self.torch.ones(n, c, dtype=self.torch.bool, device=self.dev).tril(c - n)
        return sdpa(q[None], k[None], v[None], attn_mask=mask, enable_gqa=True)[0]

    def decode_attention(self, q: Any, k: Any, v: Any) -> Any:
        b, hq, d = q.shape
        out = self.torch.nn.functional.scaled_dot_product_attention(q[:, :, None, :], k, v, enable_gqa=True)
        return out.reshape(b, hq * d)

    def argmax(self, logits: Any) -> Any:
        return logits.float().argmax(dim=-1)

    def topk(self, logits: Any, k: int) -> tuple[Any, Any]:
        """A MoE router's top-k in float32, its weights renormalised over the k (softmax of the top logits)."""
        top, ids = logits.float().topk(k, dim=-1)
        return ids, top.softmax(dim=-1)

    def combine(self, rows: Any, weights: Any) -> Any:
        """Each token's k expert rows ([T x k, H], token-major) summed by its weights [T, k] in float32."""
        t, k = weights.shape
        return (rows.reshape(t, k, -1).float() * weights[:, :, None]).sum(dim=1).to(rows.dtype)

    def softmax_sample(self, logits: Any, seed: int) -> Any:
        """Temperature sampling (temperature 1): the Gumbel-max trick over float32 logits."""
        u = self.torch.rand(logits.shape, device=self.dev, dtype=self.torch.float32).clamp_(1e-10, 1.0)
        return (logits.float() - (-u.log()).log()).argmax(dim=-1)

    def all_reduce(self, sizes: Sequence[int], target_s: float) -> list[dict]:
        """All-reduce by size over every device this backend sees (distsim.profile.collectives)."""
        from distsim.profile.collectives import all_reduce_rows

        return all_reduce_rows(self.device().count, sizes, target_s, self.cuda)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def _graph(self, fn: Callable[[], Any]) -> Callable[[], Any] | None:
        """``fn`` captured in a CUDA graph (its replay), None when it cannot be captured."""
        t = self.torch
        try:
            side = t.cuda.Stream(self.dev)
            side.wait_stream(t.cuda.current_stream(self.dev))
            with t.cuda.stream(side):
                fn()
                fn()
            t.cuda.current_stream(self.dev).wait_stream(side)
            graph = t.cuda.CUDAGraph()
            with t.cuda.graph(graph):
                fn()
            return graph.replay
        except RuntimeError:
            self.sync()
            return None

    def time(self, fn: Callable[[], Any], target_s: float) -> Timing:
        if not self.cuda:
            return repeat_timing(wall_timer(fn, self.sync), target_s)
        run = self._graph(fn) if self.graphs else None
        run = run or fn
        t = self.torch
        start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)

        def call() -> float:
            start.record()
            run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3

        return repeat_timing(call, target_s)


@BACKENDS.register("torch")
def torch_backend() -> TorchBackend:
    try:
        import torch
    except ImportError:
        raise UserError(INSTALL) from None
    torch.set_grad_enabled(False)
    return TorchBackend(torch)
