"""A dense model's forward pass on one GPU of a tensor-parallel group, built from a backend's operations
the way vLLM runs such a model (and ``../shared/data/h100_steps`` builds its steps): per layer RMSNorm,
the fused QKV projection, the new keys and values written into the KV cache, attention (prefill chunks
one call each, bottom-right causal over their cached context; the decodes one batched call), the O
projection and residual, RMSNorm, the fused gate_up projection, SiLU-and-mul, the down projection and
residual; then the final norm and the lm_head at each sequence's last token, and the sampler.

The shapes are per GPU (heads, KV heads, the MLP's width and the lm_head's rows divided by ``tp``; KV
heads replicated when fewer than ``tp``), so one GPU measures a TP shard's kernels (no collectives), as
the step tables' ``tp`` column says.

A mixture-of-experts model whose every layer is MoE and has no shared expert (Mixtral, Qwen3-MoE) runs,
in place of the gated MLP, the FFN that ``../shared/data/h100_steps``'s MoE tables build
(``stepbench_moe.py``): the router GEMM to E logits, top-k with its weights renormalised over the k, the
token rows gathered in expert order, the gate_up and down GEMMs of every expert over its rows (a loop
over the experts: one GEMM each, not one grouped kernel), SiLU-and-mul between them, and the weighted
sum of each token's k rows. Which experts a token goes to is drawn once per step from a fixed seed,
uniformly (as the H100 tables' random routers spread their tokens, their README), so the rows per
expert are the step's own and every closure has fixed shapes (a CUDA graph captures it); the router
and top-k still run and are timed. Experts are not split by tensor parallelism's ``tp`` (each GPU holds
every expert at 1/tp of its width, as vLLM's TP MoE does). Sliding-window, latent-attention and
quantised models, and MoE models with dense or shared-expert layers, are refused: their kernels are not
built here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    experts: int = 0  # a MoE model's routed experts (0: dense); ``intermediate`` is then each expert's width
    top_k: int = 0

    @property
    def qkv_width(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    def gemms(self) -> dict[str, tuple[int, int]]:
        """Each matmul's weight (in, out): what micro_gemm.csv times by rows (a MoE model's router and
        one expert's gate_up and down: micro_moe.csv times those by rows per expert)."""
        ffn = {"router": (self.hidden, self.experts), "expert_gate_up": (self.hidden, 2 * self.intermediate),
               "expert_down": (self.intermediate, self.hidden)} if self.experts else {
               "gate_up": (self.hidden, 2 * self.intermediate), "down": (self.intermediate, self.hidden)}
        return {"qkv": (self.hidden, self.qkv_width), "o": (self.q_heads * self.head_dim, self.hidden), **ffn,
                "lm_head": (self.hidden, self.vocab)}

    def weight_bytes(self) -> int:
        copies = {"expert_gate_up": self.experts, "expert_down": self.experts}
        per_layer = sum(i * o * copies.get(name, 1) for name, (i, o) in self.gemms().items() if name != "lm_head")
        return (self.layers * per_layer + self.hidden * self.vocab) * self.dtype_bytes

    def kv_bytes(self, step: Step) -> int:
        tokens = sum(c + n for n, c in step.chunks) + step.decodes * step.context
        return 2 * self.layers * tokens * self.kv_heads * self.head_dim * self.dtype_bytes

    def activation_bytes(self, step: Step) -> int:
        """A bound on the step's live activations: a few rows of the widest matmul output, the logits and
        the prefill chunks' attention scores (the numpy backend materialises them)."""
        widest = max(self.qkv_width, 2 * self.intermediate * max(1, self.top_k), self.hidden * max(1, self.top_k))
        scores = sum(self.q_heads * n * (n + c) for n, c in step.chunks) + step.decodes * self.q_heads * step.context
        return (6 * step.tokens * widest + 2 * step.sampled * self.vocab + 3 * scores) * max(self.dtype_bytes, 4)


def shard_of(model: ModelSpec, tp: int, layers: int, dtype_bytes: int) -> Shard:
    """The per-GPU shapes of ``model`` at ``tp``, ``layers`` of its layers; a model whose kernels this
    forward pass does not build is one UserError."""
    unsupported = [
        what
        for what, yes in (
            ("mixture-of-experts with dense layers", model.is_moe and model.num_moe_layers != model.num_layers),
            ("shared experts", model.num_shared_experts > 0),
            ("sliding-window attention", model.num_sliding_layers > 0),
            ("latent attention (MLA)", model.kv_lora_rank > 0),
            (f"quantised weights ({model.quant_method})", bool(model.quant_method)),
        )
        if yes
    ]
    if unsupported:
        raise UserError(f"--model {model.name}: the profiler builds dense and all-MoE models only, not {', '.join(unsupported)}")
    width = ("moe_intermediate_size", model.moe_intermediate_size) if model.is_moe else ("intermediate_size", model.intermediate_size)
    for what, n in (("num_attention_heads", model.num_attention_heads), width):
        if n % tp:
            raise UserError(f"--tp {tp} does not divide {model.name}'s {what} ({n})")
    if not 0 < layers <= model.num_layers:
        raise UserError(f"--layers must be in 1..{model.num_layers} for {model.name} (got {layers})")
    vocab = -(-model.vocab_size // tp)
    return Shard(
        model.hidden_size, model.num_attention_heads // tp, int(model.kv_heads_per_gpu(tp)), model.head_dim,
        width[1] // tp, vocab, layers, dtype_bytes, model.num_experts, model.experts_per_token,
    )


ROUTING_SEED = 0  # the uniform routing each step's tokens get (module docstring)


def routing(tokens: int, experts: int, top_k: int, seed: int = ROUTING_SEED) -> np.ndarray:
    """Each token's ``top_k`` distinct experts, uniformly at random from a fixed seed: [tokens, top_k]."""
    rng = np.random.default_rng([seed, tokens, experts, top_k])
    return np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]


@dataclass(frozen=True)
class Dispatch:
    """A step's routing as the expert loop runs it: the (token, slot) pairs in expert order (``order``,
    indices into the T*k pairs), each expert's span of them, and each pair's place in that order."""

    order: list[int]
    spans: list[tuple[int, int, int]]  # (expert, first, end) of the sorted pairs, experts with rows only
    inverse: list[int]

    @property
    def rows_per_expert(self) -> list[int]:
        return [end - first for _, first, end in self.spans]


def dispatch(chosen: np.ndarray, experts: int) -> Dispatch:
    """The stable expert order of the pairs ``chosen`` [T, k] makes (the H100 tables' counting sort)."""
    flat = chosen.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=experts)
    ends = np.cumsum(counts)
    spans = [(e, int(ends[e] - counts[e]), int(ends[e])) for e in range(experts) if counts[e]]
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return Dispatch(order.tolist(), spans, inverse.tolist())


class DenseForward:
    """The shard's weights on the backend, and a closure per step that runs its forward pass."""

    def __init__(self, backend: Backend, shard: Shard) -> None:
        self.b = backend
        self.s = shard
        s = shard
        w = lambda i, o: backend.randn((i, o), scale=i**-0.5)  # noqa: E731
        g = s.gemms()
        if s.experts:
            self.layers = [(w(*g["qkv"]), w(*g["o"]), w(*g["router"]), [w(*g["expert_gate_up"]) for _ in range(s.experts)],
                            [w(*g["expert_down"]) for _ in range(s.experts)]) for _ in range(s.layers)]
        else:
            self.layers = [tuple(w(*shape) for name, shape in g.items() if name != "lm_head") for _ in range(s.layers)]
        self.lm_head = w(*g["lm_head"])

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

        ffn = self.moe_ffn(step.tokens) if s.experts else (lambda h, layer: b.matmul(b.silu_mul(b.matmul(h, layer[2])), layer[3]))

        def run() -> Any:
            x = x0
            for i, layer in enumerate(self.layers):
                attn = attention(b.matmul(b.rmsnorm(x), layer[0]), i)
                x = b.add(x, b.matmul(attn, layer[1]))
                x = b.add(x, ffn(b.rmsnorm(x), layer))
            return sample(b.matmul(b.rmsnorm(x[rows]), self.lm_head))

        return run

    def moe_ffn(self, tokens: int) -> Callable[[Any, tuple], Any]:
        """The MoE FFN of a step of ``tokens`` rows (module docstring), as a function of the normed
        hidden rows and the layer's weights."""
        b, s = self.b, self.s
        d = dispatch(routing(tokens, s.experts, s.top_k), s.experts)
        gather = b.index([p // s.top_k for p in d.order])  # the token row of each pair in expert order
        back = b.index(d.inverse)

        def ffn(h: Any, layer: tuple) -> Any:
            _, weights = b.topk(b.matmul(h, layer[2]), s.top_k)  # the router and its top-k, timed
            xs = h[gather]
            parts = [b.matmul(b.silu_mul(b.matmul(xs[lo:hi], layer[3][e])), layer[4][e]) for e, lo, hi in d.spans]
            return b.combine(b.concat(parts)[back], weights)

        return ffn
