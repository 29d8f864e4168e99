"""A dense model's forward pass on one GPU of a tensor-parallel group, built from a backend's operations
the way vLLM runs such a model (and ``../shared/data/h100_steps`` builds its steps): per layer RMSNorm,
the fused QKV projection, the new keys and values written into the KV cache, attention (prefill chunks
one call each, bottom-right causal over their cached context; the decodes one batched call), the O
projection and residual, RMSNorm, the fused gate_up projection, SiLU-and-mul, the down projection and
residual; then the final norm and the lm_head at each sequence's last token, and the sampler.

The shapes are per GPU (heads, KV heads, the MLP's width and the lm_head's rows divided by ``tp``; KV
heads replicated when fewer than ``tp``), so one GPU measures a TP shard's kernels (no collectives), as
the step tables' ``tp`` column says. Mixture-of-experts, sliding-window, latent-attention and quantised
models are refused: their kernels are not built here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distsim.catalog import ModelSpec
from distsim.errors import UserError
from distsim.profile.backend import Backend


@dataclass(frozen=True)
class Step:
    """One engine step: prefill chunks (new tokens, tokens cached before them) and ``decodes`` sequences
    each attending to ``context`` KV tokens (its new one included)."""

    kind: str  # decode, prefill, prefill_ctx, mixed (the step tables' kinds)
    chunks: tuple[tuple[int, int], ...] = ()
    decodes: int = 0
    context: int = 0

    @property
    def prefill_tokens(self) -> int:
        return sum(n for n, _ in self.chunks)

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decodes

    @property
    def sampled(self) -> int:
        return self.decodes + len(self.chunks)

    def shape_columns(self) -> dict[str, int]:
        """The step tables' shape columns (``../shared/data/h100_steps/README.md``, "Columns")."""
        return {
            "batch": self.decodes + len(self.chunks),
            "tokens": self.tokens,
            "context": self.context if self.decodes else (self.chunks[0][1] if self.chunks else 0),
            "prefill_tokens": self.prefill_tokens,
            "decode_tokens": self.decodes,
            "prefill_seqs": len(self.chunks),
            "prefill_context": sum(c for _, c in self.chunks) if self.kind == "prefill_ctx" else 0,
            "prefill_attn_pairs": sum(n * c + n * (n + 1) // 2 for n, c in self.chunks),
            "prefill_kv_tokens": sum(c + n for n, c in self.chunks),
            "decode_ctx_total": self.decodes * self.context,
        }


@dataclass(frozen=True)
class Shard:
    """One GPU's shapes of a dense model at tensor-parallel degree ``tp``, ``layers`` of its layers."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    layers: int
    dtype_bytes: int

    @property
    def qkv_width(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    def gemms(self) -> dict[str, tuple[int, int]]:
        """Each matmul's weight (in, out): what micro_gemm.csv times by rows."""
        return {
            "qkv": (self.hidden, self.qkv_width),
            "o": (self.q_heads * self.head_dim, self.hidden),
            "gate_up": (self.hidden, 2 * self.intermediate),
            "down": (self.intermediate, self.hidden),
            "lm_head": (self.hidden, self.vocab),
        }

    def weight_bytes(self) -> int:
        per_layer = sum(i * o for name, (i, o) in self.gemms().items() if name != "lm_head")
        return (self.layers * per_layer + self.hidden * self.vocab) * self.dtype_bytes

    def kv_bytes(self, step: Step) -> int:
        tokens = sum(c + n for n, c in step.chunks) + step.decodes * step.context
        return 2 * self.layers * tokens * self.kv_heads * self.head_dim * self.dtype_bytes

    def activation_bytes(self, step: Step) -> int:
        """A bound on the step's live activations: a few rows of the widest matmul output, the logits and
        the prefill chunks' attention scores (the numpy backend materialises them)."""
        widest = max(self.qkv_width, 2 * self.intermediate, self.hidden)
        scores = sum(self.q_heads * n * (n + c) for n, c in step.chunks) + step.decodes * self.q_heads * step.context
        return (6 * step.tokens * widest + 2 * step.sampled * self.vocab + 3 * scores) * max(self.dtype_bytes, 4)


def shard_of(model: ModelSpec, tp: int, layers: int, dtype_bytes: int) -> Shard:
    """The per-GPU shapes of ``model`` at ``tp``, ``layers`` of its layers; a model whose kernels this
    forward pass does not build is one UserError."""
    unsupported = [
        what
        for what, yes in (
            ("mixture-of-experts", model.is_moe),
            ("sliding-window attention", model.num_sliding_layers > 0),
            ("latent attention (MLA)", model.kv_lora_rank > 0),
            (f"quantised weights ({model.quant_method})", bool(model.quant_method)),
        )
        if yes
    ]
    if unsupported:
        raise UserError(f"--model {model.name}: the profiler builds dense models only, not {', '.join(unsupported)}")
    for what, n in (("num_attention_heads", model.num_attention_heads), ("intermediate_size", model.intermediate_size)):
        if n % tp:
            raise UserError(f"--tp {tp} does not divide {model.name}'s {what} ({n})")
    if not 0 < layers <= model.num_layers:
        raise UserError(f"--layers must be in 1..{model.num_layers} for {model.name} (got {layers})")
    vocab = -(-model.vocab_size // tp)
    return Shard(
        model.hidden_size, model.num_attention_heads // tp, int(model.kv_heads_per_gpu(tp)), model.head_dim,
        model.intermediate_size // tp, vocab, layers, dtype_bytes,
    )


class DenseForward:
    """The shard's weights on the backend, and a closure per step that runs its forward pass."""

    def __init__(self, backend: Backend, shard: Shard) -> None:
        self.b = backend
        self.s = shard
        s = shard
        w = lambda i, o: backend.randn((i, o), scale=i**-0.5)  # noqa: E731
        self.layers = [tuple(w(*shape) for name, shape in s.gemms().items() if name != "lm_head") for _ in range(s.layers)]
        self.lm_head = w(*s.gemms()["lm_head"])

    def step(self, step: Step, sampler: str = "greedy") -> Callable[[], Any]:
        """A closure that runs ``step`` once (its inputs and KV caches allocated here, outside it)."""
        b, s = self.b, self.s
        x0 = b.randn((step.tokens, s.hidden))
        d = s.head_dim
        chunk_kv = [[(b.zeros((s.kv_heads, c + n, d)), b.zeros((s.kv_heads, c + n, d))) for n, c in step.chunks] for _ in self.layers]
        dec_kv = [
            (b.zeros((step.decodes, s.kv_heads, step.context, d)), b.zeros((step.decodes, s.kv_heads, step.context, d)))
            if step.decodes else None
            for _ in self.layers
        ]
        q_w, kv_w = s.q_heads * d, s.kv_heads * d
        # the last row of each prefill chunk, then every decode row: the rows the lm_head computes
        ends = []
        at = 0
        for n, _ in step.chunks:
            at += n
            ends.append(at - 1)
        rows = b.index(ends + list(range(at, at + step.decodes)))
        sample = b.argmax if sampler == "greedy" else (lambda logits: b.softmax_sample(logits, 0))

        def attention(qkv: Any, layer: int) -> Any:
            parts, at = [], 0
            for (n, c), (kc, vc) in zip(step.chunks, chunk_kv[layer]):
                part = qkv[at : at + n]
                b.write_kv(kc, b.heads(part[:, q_w : q_w + kv_w], s.kv_heads, d), c)
                b.write_kv(vc, b.heads(part[:, q_w + kv_w :], s.kv_heads, d), c)
                parts.append(b.merge(b.prefill_attention(b.heads(part[:, :q_w], s.q_heads, d), kc, vc)))
                at += n
            if step.decodes:
                kc, vc = dec_kv[layer]
                part = qkv[at:]
                b.write_kv(kc, part[:, q_w : q_w + kv_w].reshape(step.decodes, s.kv_heads, 1, d), step.context - 1)
                b.write_kv(vc, part[:, q_w + kv_w :].reshape(step.decodes, s.kv_heads, 1, d), step.context - 1)
                parts.append(b.decode_attention(part[:, :q_w].reshape(step.decodes, s.q_heads, d), kc, vc))
            return b.concat(parts)

        def run() -> Any:
            x = x0
            for i, (w_qkv, w_o, w_gu, w_down) in enumerate(self.layers):
                attn = attention(b.matmul(b.rmsnorm(x), w_qkv), i)
                x = b.add(x, b.matmul(attn, w_o))
                x = b.add(x, b.matmul(b.silu_mul(b.matmul(b.rmsnorm(x), w_gu)), w_down))
            return sample(b.matmul(b.rmsnorm(x[rows]), self.lm_head))

        return run
