"""Model architectures read from HuggingFace ``config.json`` files.

The simulator needs a handful of numbers per model: bytes of weights per GPU (what a decode step reads
and what fills GPU memory), bytes of KV cache per token (what limits the batch), and FLOPs per token and
per attention pair (what a prefill step computes). All of them follow from the architecture in the HF
config, so the catalog ships those configs unchanged and derives everything here.

Conventions (documented because each is a modelling choice):

* Every MLP is gated (SwiGLU: gate, up and down projections, 3 x hidden x intermediate), as in all
  shipped models.
* Tensor parallelism shards attention heads, MLP/expert intermediate dims and the vocabulary (embedding
  and lm_head, as vLLM's vocab-parallel layers do); norms, the MoE router and MLA's ``kv_a`` projection
  are replicated. K/V heads are sharded when ``num_kv_heads >= tp`` and replicated (one head per GPU)
  otherwise; MLA's compressed latent is replicated on every rank.
* KV cache dtype equals the weight dtype (vLLM's ``kv_cache_dtype=auto``). MLA caches one latent of
  ``kv_lora_rank + qk_rope_head_dim`` values per layer and token, not per head.
* Sliding-window layers (gpt-oss alternates them with full layers) hold at most ``sliding_window``
  tokens per sequence, so :attr:`ModelSpec.kv_bytes_per_token` counts only full-attention layers and
  the bounded window cache is reported per sequence by :meth:`ModelSpec.kv_window_bytes_per_seq_per_gpu`.
* MXFP4-quantised experts (gpt-oss) store 4.25 bits per weight: 4-bit FP4 values plus one 8-bit shared
  scale per block of 32 (OCP Microscaling Formats spec v1.0). Other quantisation methods are refused
  rather than silently sized as bf16 (awq, gptq, bitsandbytes, int8 compressed-tensors...).
* ``text_config`` (multimodal wrappers: Llama-4, Qwen-VL style): the language model's fields are read
  from it; ``torch_dtype``, ``dtype``, ``quantization_config`` and ``tie_word_embeddings`` are taken from
  the top level only when ``text_config`` lacks them (absent or null): ``text_config`` wins. The vision
  tower and projector are not counted (vLLM holds them too, a few hundred MB for Llama-4). Errors name
  nested fields as ``text_config.<field>``.
* Llama-4 (``model_type`` llama4_text): layer ``i`` is MoE when ``(i + 1) % interleave_moe_layer_step ==
  0``; each MoE layer has ``num_local_experts`` routed experts and one shared expert, all of width
  ``intermediate_size``, top-``num_experts_per_tok`` routing (router ``hidden x experts``, no bias); dense
  layers use ``intermediate_size_mlp``. ``use_qk_norm`` is a weightless L2 norm (no parameters).
  ``attention_chunk_size`` / ``no_rope_layers`` (chunked local attention in 3 of 4 layers) are not
  modelled: vLLM turns its hybrid KV cache manager off for chunked local attention by default, so every
  layer caches every token (what the Scout runs' 8,253 KV blocks at TP2 agree with), and attention FLOPs
  are those of full attention (exact up to ``attention_chunk_size`` tokens, 8,192 for Scout).
* FP8 weights: ``quant_method`` ``fp8`` (per-tensor scales, or one per ``weight_block_size`` block;
  ``modules_to_not_convert``) and ``compressed-tensors`` whose ``config_groups.*`` all target
  ``Linear`` with 8-bit float ``weights`` (``strategy`` tensor, channel, block with ``block_structure``,
  or group with ``group_size``; ``ignore``). Quantised matrices (attention Q/K/V/O and MLA projections,
  dense MLPs, routed and shared experts, lm_head) store 1 byte per weight plus float32 scales as vLLM
  keeps them: 4 bytes per tensor, per output row (channel), per ``ceil(rows/br) x ceil(cols/bc)`` block
  or per row and group. Biases, norms, the embedding (not a Linear) and the MoE router (vLLM builds it
  with ``quant_config=None``) stay at the model dtype, as do the modules the ignore list names: exact
  names (a ``language_model.`` wrapper dropped) or ``re:`` regular expressions matched from the start,
  each group counted in the layers where it is ignored. K/V values are cached at the model dtype unless
  ``kv_cache_scheme`` declares 8-bit floats (then 1 byte). Activations stay at the model dtype.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from distsim import inputs
from distsim.catalog.fields import MAX_LAYERS, MAX_SIZE, FieldReader
from distsim.errors import ConfigError, InputFileError
from distsim.inputs import excerpt

FP8_SCALE_BYTES = 4  # vLLM holds FP8 weight scales (per tensor, channel or block) in float32
MXFP4_BYTES_PER_PARAM = 4.25 / 8  # OCP MX spec v1.0: 32 x FP4 (4 bit) + one E8M0 scale (8 bit) per block
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture and the parameter counts derived from it (weights in ``dtype_bytes``)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int
    max_position_embeddings: int = 0  # the context length vLLM derives max_model_len from (0: not given)
    tie_word_embeddings: bool = False
    # Mixture of experts (num_experts == 0: dense)
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    num_moe_layers: int = 0
    first_k_dense_replace: int = 0
    expert_weight_bytes: float = 2.0  # bytes per routed-expert weight (0.53125 for MXFP4)
    # Multi-head latent attention (kv_lora_rank == 0: not MLA)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Sliding-window attention layers
    sliding_window: int = 0
    num_sliding_layers: int = 0
    # Parameter groups (counts), see _derive_params
    attn_sharded_params: int = 0  # per layer: Q, O (and MLA's kv_b), biases, sinks
    kv_proj_params: int = 0  # per layer: K and V projections (replicated when num_kv_heads < tp)
    layer_replicated_params: int = 0  # per layer: norms, MLA kv_a projection
    dense_mlp_params: int = 0  # per dense layer
    expert_params: int = 0  # per routed expert, per MoE layer
    shared_expert_params: int = 0  # all shared experts of one MoE layer
    router_params: int = 0  # per MoE layer
    embed_params: int = 0
    lm_head_params: int = 0  # 0 when tied to the embedding
    final_norm_params: int = 0
    active_matmul_params: int = 0  # matmul weights one token multiplies, lm_head excluded
    # Bytes per parameter of each group when it differs from dtype_bytes (FP8: quantised matrices at 1
    # byte plus their float32 scales, biases, norms and ignored modules at dtype_bytes); 0.0: dtype_bytes.
    # Routed experts use expert_weight_bytes above.
    attn_weight_bytes: float = 0.0
    kv_proj_weight_bytes: float = 0.0
    layer_replicated_weight_bytes: float = 0.0
    dense_mlp_weight_bytes: float = 0.0
    shared_expert_weight_bytes: float = 0.0
    router_weight_bytes: float = 0.0
    lm_head_weight_bytes: float = 0.0
    kv_cache_bytes: int = 0  # bytes per cached K/V value; 0: dtype_bytes (vLLM's kv_cache_dtype=auto)
    quant_method: str = ""  # "" (unquantised), "fp8" (W8A8: matmuls on FP8 tensor cores) or "mxfp4"
    # the sampling defaults of a generation_config.json beside the config.json (temperature, top_p,
    # top_k): vLLM applies them to requests that set none; () when there is no such file
    generation_defaults: tuple[tuple[str, float], ...] = ()

    @property
    def fp8_matmuls(self) -> bool:
        """Whether the matmuls run on FP8 tensor cores (FP8 weights with dynamic FP8 activations, as
        vLLM runs fp8 and compressed-tensors FP8 checkpoints on GPUs that have them)."""
        return self.quant_method == "fp8"

    # ---- whole-model figures -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    @property
    def total_params(self) -> int:
        per_layer = self.attn_sharded_params + self.kv_proj_params + self.layer_replicated_params
        moe = self.num_experts * self.expert_params + self.shared_expert_params + self.router_params
        return (
            self.num_layers * per_layer
            + self.num_dense_layers * self.dense_mlp_params
            + self.num_moe_layers * moe
            + self.embed_params
            + self.lm_head_params
            + self.final_norm_params
        )

    @property
    def active_params(self) -> int:
        """Parameters one token uses: all but the routed experts it is not sent to (embedding counted)."""
        idle = self.num_moe_layers * (self.num_experts - self.experts_per_token) * self.expert_params
        return self.total_params - idle

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes per cached K/V value: the model dtype unless the config declares an FP8 KV cache."""
        return self.kv_cache_bytes or self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token adds over the whole model (full-attention layers; MLA: the latent)."""
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return self.num_full_attention_layers * 2 * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    # ---- tensor parallelism -------------------------------------------------------------------
    def check_tensor_parallel(self, tp: int, key: str = "cluster.engine.tensor_parallel_size") -> None:
        """Refuse a TP degree vLLM would refuse: heads must split evenly, K/V heads split or replicate."""
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ConfigError(key, f"must be an integer >= 1 (got {tp!r})")
        if self.num_attention_heads % tp:
            raise ConfigError(
                key, f"{self.name} has {self.num_attention_heads} attention heads, not divisible by {tp}"
            )
        if not self.is_mla and self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise ConfigError(
                key,
                f"{self.name} has {self.num_kv_heads} KV heads: tensor_parallel_size must divide it or be a multiple of it (got {tp})",
            )

    def kv_heads_per_gpu(self, tp: int) -> float:
        """K/V heads each rank holds: sharded while there are enough, else one replicated head."""
        return self.num_kv_heads / tp if self.num_kv_heads >= tp else 1.0

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        if self.is_mla:
            return float(self.kv_bytes_per_token)  # the latent is replicated on every rank
        per_head = self.num_full_attention_layers * 2 * self.head_dim * self.kv_dtype_bytes
        return per_head * self.kv_heads_per_gpu(tp)

    def window_kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV bytes per token over the sliding-window layers only (0 without such layers)."""
        return self.num_sliding_layers * 2 * self.head_dim * self.kv_dtype_bytes * self.kv_heads_per_gpu(tp)

    def kv_window_bytes_per_seq_per_gpu(self, tp: int) -> float:
        """Most KV bytes one sequence holds in the sliding-window layers (a full window)."""
        return self.window_kv_bytes_per_token_per_gpu(tp) * self.sliding_window

    def expert_bytes_per_gpu(self, tp: int) -> float:
        """Bytes of one routed expert of one layer on one rank (expert MLPs are sharded over TP)."""
        return self.expert_params * self.expert_weight_bytes / tp

    def routed_expert_bytes_per_gpu(self, tp: int) -> float:
        return self.num_moe_layers * self.num_experts * self.expert_bytes_per_gpu(tp)

    def weight_bytes_per_gpu(self, tp: int, expert_dp: int = 1) -> int:
        """Bytes of weights resident on each of the ``tp`` ranks; with expert parallelism over
        ``expert_dp`` data-parallel engines the routed experts are spread over tp x expert_dp GPUs."""
        kv_share = self.kv_heads_per_gpu(tp) / self.num_kv_heads
        per_layer = (
            self.attn_sharded_params / tp + self.kv_proj_params * kv_share + self.layer_replicated_params
        )
        dense = self.num_dense_layers * self.dense_mlp_params / tp
        moe = self.num_moe_layers * (self.shared_expert_params / tp + self.router_params)
        vocab = (self.embed_params + self.lm_head_params) / tp
        params = self.num_layers * per_layer + dense + moe + vocab + self.final_norm_params
        exact = params * self.dtype_bytes + self.routed_expert_bytes_per_gpu(tp) / expert_dp
        return int(round(exact + self._width_correction_per_gpu(tp, kv_share)))

    def _width_correction_per_gpu(self, tp: int, kv_share: float) -> float:
        """Bytes per rank that groups stored at another width than dtype_bytes add (FP8: negative);
        exactly 0 for a model without such groups, so its figures are unchanged."""
        groups = (
            (self.attn_weight_bytes, self.num_layers * self.attn_sharded_params / tp),
            (self.kv_proj_weight_bytes, self.num_layers * self.kv_proj_params * kv_share),
            (self.layer_replicated_weight_bytes, self.num_layers * self.layer_replicated_params),
            (self.dense_mlp_weight_bytes, self.num_dense_layers * self.dense_mlp_params / tp),
            (self.shared_expert_weight_bytes, self.num_moe_layers * self.shared_expert_params / tp),
            (self.router_weight_bytes, self.num_moe_layers * self.router_params),
            (self.lm_head_weight_bytes, self.lm_head_params / tp),
        )
        return sum((p * (w - self.dtype_bytes) for w, p in groups if w), 0.0)

    def non_expert_weight_bytes_per_gpu(self, tp: int) -> float:
        """Weight bytes every step reads whatever the routing: all but the routed experts."""
        return self.weight_bytes_per_gpu(tp) - self.routed_expert_bytes_per_gpu(tp)

    # ---- MoE routing --------------------------------------------------------------------------
    def expected_experts_touched(self, tokens: int) -> float:
        """Expected distinct experts one MoE layer activates for ``tokens`` tokens.

        Each token picks ``k`` of ``E`` experts; treating the picks as uniform and independent, an
        expert is missed by one token with probability ``1 - k/E``, so ``E * (1 - (1 - k/E)**n)``
        experts are touched. Real routers are skewed, which touches fewer; this is an upper-side guess.
        """
        if not self.is_moe or tokens <= 0:
            return 0.0
        e = self.num_experts
        return e * (1.0 - (1.0 - self.experts_per_token / e) ** tokens)

    def unread_embedding_bytes_per_gpu(self, tp: int) -> float:
        """Bytes of the input embedding table a step does not read: it gathers only its tokens' rows.
        A tied table is also the LM head, which every step reads whole, so then nothing is skipped."""
        return 0.0 if self.tie_word_embeddings else self.embed_params * self.dtype_bytes / tp

    def weight_bytes_read_per_gpu(self, tp: int, tokens: int) -> float:
        """Weight bytes one step of ``tokens`` tokens reads per rank: every weight but the untied input
        embedding table (MoE: of the routed experts only the touched ones)."""
        if not self.is_moe:
            return float(self.weight_bytes_per_gpu(tp)) - self.unread_embedding_bytes_per_gpu(tp)
        touched = self.expected_experts_touched(tokens)
        return (
            self.non_expert_weight_bytes_per_gpu(tp)
            - self.unread_embedding_bytes_per_gpu(tp)
            + self.num_moe_layers * touched * self.expert_bytes_per_gpu(tp)
        )

    # ---- FLOPs --------------------------------------------------------------------------------
    def linear_flops_per_token(self, include_lm_head: bool = True) -> int:
        """Matmul FLOPs of one token (2 per weight); the embedding lookup is not a matmul.

        vLLM computes logits only at sampled positions, so a caller may leave the lm_head out for
        prefill tokens that are not the last of their prompt.
        """
        head = self.vocab_size * self.hidden_size if include_lm_head else 0
        return 2 * (self.active_matmul_params + head)

    def attn_flops_per_pair(self) -> int:
        """FLOPs of one query-key pair over the full-attention layers (QK^T and AV, 2 FLOPs per MAC).

        Standard: 4 x heads x head_dim per layer. MLA as computed in prefill (K and V materialised):
        2 x heads x (qk_nope + qk_rope) for QK^T plus 2 x heads x v_head_dim for AV.
        """
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return self.num_layers * 2 * self.num_attention_heads * (qk + self.v_head_dim)
        return self.num_full_attention_layers * 4 * self.num_attention_heads * self.head_dim

    def attn_flops_per_decode_pair(self) -> int:
        """Like :meth:`attn_flops_per_pair` for a decode query. MLA decodes in the weight-absorbed form
        (attention runs over the latent): 2 x heads x (kv_lora_rank + qk_rope) + 2 x heads x kv_lora_rank.
        """
        if self.is_mla:
            width = (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            return self.num_layers * 2 * self.num_attention_heads * width
        return self.attn_flops_per_pair()

    def attn_window_flops_per_token(self) -> int:
        """Upper bound of sliding-window attention FLOPs per query token: a full window in each such layer."""
        return self.num_sliding_layers * 4 * self.num_attention_heads * self.head_dim * self.sliding_window


# ---- reading HF config.json ---------------------------------------------------------------------


def read_config_file(path: Path) -> dict[str, Any]:
    """Read one config.json; a missing, unreadable, non-text or broken file is the user's file error."""
    return inputs.read_json(path, what="a JSON object (a HuggingFace config.json)")


# Fields a multimodal wrapper keeps only at its top level that still describe the language model.
_TOP_LEVEL_FALLBACKS = ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings")


def _language_reader(cfg: dict[str, Any], where: str, key: str) -> FieldReader:
    """A reader over the language model's fields: ``text_config`` when the file has one (its fields win),
    with the :data:`_TOP_LEVEL_FALLBACKS` that ``text_config`` lacks (absent or null) taken from the top."""
    top = FieldReader(cfg, where, key)
    text = top.sub("text_config")
    if text is None:
        return top
    taken = {k: cfg[k] for k in _TOP_LEVEL_FALLBACKS if cfg.get(k) is not None and text.cfg.get(k) is None}
    return FieldReader({**text.cfg, **taken}, where, key, prefix="text_config.", top_level=frozenset(taken))


_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
_LAYER_TYPES = ("full_attention", "sliding_attention")
_LLAMA4_TYPES = ("llama4_text", "llama4")


def _dtype_bytes(r: FieldReader) -> int:
    name = r.same_str(("torch_dtype", "dtype"), "bfloat16")
    if name not in _DTYPE_BYTES:
        raise r.fail(f"unsupported weight dtype '{name}' (known: {', '.join(sorted(_DTYPE_BYTES))})")
    return _DTYPE_BYTES[name]


_QUANT_REFUSAL = "(only unquantised bfloat16/float16/float32 weights, fp8 or compressed-tensors FP8 weights, and mxfp4 experts)"
_FP8_STRATEGIES = ("tensor", "channel", "block", "group")


@dataclass(frozen=True)
class _Quant:
    """``quantization_config`` reduced to what sizes the weights and the KV cache."""

    method: str = ""  # "" (none), "mxfp4" or "fp8"
    strategy: str = "tensor"  # FP8 weight scales: one per tensor, output channel, block or group
    block: tuple[int, int] = (1, 1)  # block: (rows, columns) per scale; group: (1, group_size)
    ignore: tuple[str, ...] = ()  # modules left at the model dtype (``ignore`` / ``modules_to_not_convert``)
    kv_bytes: int = 0  # bytes per KV value when kv_cache_scheme is FP8; 0: the model dtype


def _read_quant(r: FieldReader, experts: int) -> _Quant:
    """The weight format; refuses the methods not modelled rather than sizing them as bf16."""
    q = r.sub("quantization_config")
    if q is None:
        return _Quant()
    method = q.cfg.get("quant_method")
    if not isinstance(method, str):
        raise r.fail(f"'{q.label('quant_method')}' must name the method (got {excerpt(method)})")
    if method == "mxfp4" and experts:  # gpt-oss: experts in MXFP4; attention, router, embedding stay bf16
        return _Quant(method="mxfp4")
    if method == "mxfp4":
        raise r.fail(
            f"'{q.label('quant_method')}' mxfp4 is supported only for the experts of a mixture-of-experts model"
        )
    if method == "fp8":  # HF FineGrainedFP8 / vLLM Fp8Config: per-tensor scales unless weight_block_size
        block = q.int_list("weight_block_size", 1, MAX_SIZE, "a block is at most a whole matrix")
        if block and len(block) != 2:
            raise r.fail(f"'{q.label('weight_block_size')}' must be [rows, columns] (got {excerpt(block)})")
        strategy = "block" if block else "tensor"
        return _Quant(
            "fp8", strategy, (block[0], block[1]) if block else (1, 1), _ignored(q, "modules_to_not_convert")
        )
    if method == "compressed-tensors":
        return _read_compressed(r, q)
    raise r.fail(f"'{q.label('quant_method')}' {excerpt(method)} is not supported {_QUANT_REFUSAL}")


def _ignored(q: FieldReader, name: str) -> tuple[str, ...]:
    patterns = tuple(q.str_list(name))
    for p in patterns:
        if p.startswith("re:"):
            try:
                re.compile(p[3:])
            except re.error as e:
                raise q.fail(f"'{q.label(name)}' holds a bad regular expression {excerpt(p)}: {e}") from None
    return patterns


def _read_compressed(r: FieldReader, q: FieldReader) -> _Quant:
    """compressed-tensors: every config group must hold FP8 weights (8-bit float) on Linear layers."""
    schemes = set()
    groups = q.subs("config_groups")
    if not groups:
        raise r.fail(f"'{q.label('config_groups')}' must hold at least one scheme")
    for g in groups:
        if g.str_list("targets") != ["Linear"]:
            raise r.fail(f"'{g.label('targets')}' must be [\"Linear\"] (other targets are not modelled)")
        w = g.sub("weights")
        if w is None or (w.int("num_bits"), w.str("type", "int")) != (8, "float"):
            raise r.fail(
                f"'{g.label('weights')}' must be 8-bit float (FP8) weights; others are not supported {_QUANT_REFUSAL}"
            )
        strategy = w.str("strategy", "tensor")
        if strategy not in _FP8_STRATEGIES:
            raise r.fail(
                f"'{w.label('strategy')}' is {excerpt(strategy)}; supported: {', '.join(_FP8_STRATEGIES)}"
            )
        block = (1, 1)
        if strategy == "block":
            sizes = w.int_list("block_structure", 1, MAX_SIZE, "a block is at most a whole matrix")
            if len(sizes) != 2:
                raise r.fail(f"'{w.label('block_structure')}' must be [rows, columns] (got {excerpt(sizes)})")
            block = (sizes[0], sizes[1])
        elif strategy == "group":
            block = (1, w.int("group_size"))
        schemes.add((strategy, block))
    if len(schemes) > 1:
        raise r.fail(f"'{q.label('config_groups')}' mixes weight schemes {sorted(schemes)}; one is modelled")
    kv = q.sub("kv_cache_scheme")
    if kv is not None and (kv.int("num_bits"), kv.str("type", "int")) != (8, "float"):
        raise r.fail(f"'{q.label('kv_cache_scheme')}' must be an 8-bit float (FP8) cache or null")
    ((strategy, block),) = schemes
    return _Quant("fp8", strategy, block, _ignored(q, "ignore"), 1 if kv is not None else 0)


# Module names (HF conventions of Llama, Mixtral, Qwen, DeepSeek and Llama-4) an ignore list may name,
# per parameter group; a group is left at the model dtype in the layers where any of them is ignored.
_GROUP_MODULES = {
    "attn": tuple(
        f"self_attn.{m}"
        for m in (
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "qkv_proj",
            "q_a_proj",
            "q_b_proj",
            "kv_a_proj_with_mqa",
            "kv_b_proj",
        )
    ),
    "mlp": tuple(f"{b}.{m}" for b in ("mlp", "feed_forward") for m in ("gate_proj", "up_proj", "down_proj")),
    "expert": (
        "mlp.experts",
        "feed_forward.experts",
        "block_sparse_moe.experts",
        "mlp.experts.0.gate_proj",
        "block_sparse_moe.experts.0.w1",
    ),
    "shared": tuple(
        f"{b}.{m}.gate_proj" for b in ("mlp", "feed_forward") for m in ("shared_expert", "shared_experts")
    ),
    "router": ("mlp.gate", "block_sparse_moe.gate", "feed_forward.router", "mlp.router"),
}


def _matches(patterns: tuple[str, ...], exact: frozenset[str], name: str) -> bool:
    """An ignore entry names ``name``: exactly (after dropping a ``language_model.`` wrapper) or as a
    ``re:`` regular expression matched from the start, as compressed-tensors matches them."""
    if name in exact:
        return True
    spelled = (name, "language_model." + name, "model.language_model." + name.removeprefix("model."))
    return any(re.match(p[3:], n) for p in patterns if p.startswith("re:") for n in spelled)


def _ignored_fraction(quant: _Quant, group: str, layers: int) -> float:
    """Share of the layers in which ``group`` stays at the model dtype (lm_head: 0 or 1)."""
    exact = frozenset(
        p.replace("model.language_model.", "model.").removeprefix("language_model.")
        for p in quant.ignore
        if not p.startswith("re:")
    )
    if group == "lm_head":
        return 1.0 if _matches(quant.ignore, exact, "lm_head") else 0.0
    hit = sum(
        1
        for i in range(layers)
        if any(_matches(quant.ignore, exact, f"model.layers.{i}.{m}") for m in _GROUP_MODULES[group])
    )
    return hit / layers


def _scale_bytes(quant: _Quant, rows: int, cols: int) -> int:
    """float32 scale bytes of one FP8 weight matrix (vLLM keeps the scales in float32)."""
    if quant.strategy == "tensor":
        return FP8_SCALE_BYTES
    if quant.strategy == "channel":
        return FP8_SCALE_BYTES * rows
    br, bc = quant.block  # block and group: ceil over both dimensions
    return FP8_SCALE_BYTES * -(-rows // br) * -(-cols // bc)


def _group_width(
    quant: _Quant, dtype: int, params: int, matrices: list[tuple[int, int]], ignored: float
) -> float:
    """Bytes per parameter of one group: its FP8 matrices at 1 byte plus scales where not ignored, every
    other parameter (biases, norms, ignored layers) at the model dtype. 0.0 (the model dtype) unless FP8."""
    if quant.method != "fp8" or not params:
        return 0.0
    weights = sum(r * c for r, c in matrices)
    scales = sum(_scale_bytes(quant, r, c) for r, c in matrices)
    saved = (1.0 - ignored) * (weights * (dtype - 1) - scales)
    return (params * dtype - saved) / params


def _widths(
    quant: _Quant, dtype: int, layers: int, groups: dict[str, tuple[int, list[tuple[int, int]]]]
) -> dict[str, float]:
    """ModelSpec's ``*_weight_bytes`` fields from (params, matrices) per group (``expert`` included)."""
    field = {
        "attn": "attn_weight_bytes",
        "kv": "kv_proj_weight_bytes",
        "replicated": "layer_replicated_weight_bytes",
        "mlp": "dense_mlp_weight_bytes",
        "shared": "shared_expert_weight_bytes",
        "router": "router_weight_bytes",
        "lm_head": "lm_head_weight_bytes",
        "expert": "expert_weight_bytes",
    }
    ignore_group = {"kv": "attn", "replicated": "attn"}
    out = {"router_weight_bytes": 0.0}  # vLLM builds every MoE router unquantised (quant_config=None)
    for g, (params, mats) in groups.items():
        if g == "router":
            continue
        f = _ignored_fraction(quant, ignore_group.get(g, g), layers) if quant.method == "fp8" else 0.0
        out[field[g]] = _group_width(quant, dtype, params, mats, f)
    if quant.method == "mxfp4":
        out["expert_weight_bytes"] = MXFP4_BYTES_PER_PARAM
    elif not out["expert_weight_bytes"]:
        out["expert_weight_bytes"] = float(dtype)
    return out


def _mlp_mats(hidden: int, inter: int) -> list[tuple[int, int]]:
    """(rows, columns) of a gated MLP's gate, up and down projections."""
    return [(inter, hidden), (inter, hidden), (hidden, inter)] if inter else []


def _sliding_layers(r: FieldReader, num_layers: int) -> tuple[int, int]:
    """(window, number of sliding-window layers) from the config's conventions."""
    window = r.int("sliding_window", default=0, minimum=0)
    # Qwen2 writes use_sliding_window; Mistral-style configs leave it out and slide in every layer
    use = r.bool("use_sliding_window", default=False) if "use_sliding_window" in r.cfg else None
    types = r.choice_list("layer_types", num_layers, _LAYER_TYPES)
    if types is not None:
        n = sum(1 for t in types if t == "sliding_attention")
    elif window and use:  # Qwen2: layers from max_window_layers on
        n = num_layers - r.int("max_window_layers", default=num_layers, minimum=0, maximum=MAX_LAYERS)
    elif window and use is None:  # Mistral-style: every layer
        n = num_layers
    else:
        n = 0
    if n <= 0:
        return 0, 0
    if window < 1:
        raise r.fail(
            f"'sliding_window' must be a positive integer when sliding layers exist (got {excerpt(window)})"
        )
    return window, min(n, num_layers)


def _moe_layer_count(r: FieldReader, num_layers: int, first_k: int) -> int:
    dense_only = set(
        r.int_list(
            "mlp_only_layers",
            0,
            num_layers - 1,
            f"layers count from 0 to num_hidden_layers - 1 = {num_layers - 1}",
        )
    )
    step = r.int("decoder_sparse_step", default=1, maximum=MAX_LAYERS)
    if r.has("interleave_moe_layer_step"):  # Llama-4: layers (i + 1) % step == 0 are MoE, as vLLM builds them
        step = r.int("interleave_moe_layer_step", maximum=MAX_LAYERS)
    freq = r.int("moe_layer_freq", default=1, maximum=MAX_LAYERS)
    return sum(
        1
        for i in range(num_layers)
        if i >= first_k and i not in dense_only and (i + 1) % step == 0 and i % freq == 0
    )


def _experts(r: FieldReader) -> tuple[int, int]:
    """(routed experts, experts per token); (0, 0) for a dense model."""
    e_name, experts = r.same_int(_EXPERT_KEYS)
    k_name, top_k = r.same_int(_TOP_K_KEYS)
    if top_k and not experts:
        got = f"'{e_name}' is 0" if e_name else f"no expert count ({', '.join(_EXPERT_KEYS)}) is given"
        raise r.fail(f"'{k_name}' is {top_k} but {got}: a dense model has no experts per token")
    if experts and top_k < 1:
        raise r.fail("a mixture-of-experts model needs num_experts_per_tok >= 1")
    if top_k > experts:
        raise r.fail(f"experts per token ({top_k}) exceeds the number of experts ({experts})")
    return experts, top_k


# long: one straight derivation of the parameter groups from the HF fields, read top to bottom; the
# intermediate sizes (heads, head_dim, experts, MLA ranks) feed several groups, so splitting would pass them all around
def model_from_hf_config(cfg: dict[str, Any], name: str, where: str, key: str = "cluster.model") -> ModelSpec:
    """Validate an HF config dict and derive a :class:`ModelSpec` (``where`` names the file in errors)."""
    r = _language_reader(cfg, where, key)
    layers = r.int("num_hidden_layers", maximum=MAX_LAYERS)
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise r.fail(f"num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})")
    if r.has("head_dim"):
        head_dim = r.int("head_dim")
    else:
        if hidden % heads:
            raise r.fail(
                f"hidden_size ({hidden}) must be divisible by num_attention_heads ({heads}) when head_dim is absent"
            )
        head_dim = hidden // heads
    inter = r.int("intermediate_size")
    vocab = r.int("vocab_size")
    context = r.int("max_position_embeddings", default=0, minimum=0)
    dtype = _dtype_bytes(r)
    model_type = r.str("model_type", "")

    experts, top_k = _experts(r)
    moe_inter = r.int("moe_intermediate_size", default=inter) if experts else 0
    first_k = (
        r.int(
            "first_k_dense_replace",
            default=0,
            minimum=0,
            maximum=layers,
            why=f"num_hidden_layers is {layers}",
        )
        if experts
        else 0
    )
    n_shared = r.int("n_shared_experts", default=0, minimum=0) if experts else 0
    dense_inter = inter
    if experts and model_type in _LLAMA4_TYPES:  # experts and the one shared expert: intermediate_size
        n_shared, dense_inter = 1, r.int("intermediate_size_mlp", default=inter)  # dense layers' MLP
    shared_inter = n_shared * moe_inter
    wide_shared = r.int("shared_expert_intermediate_size", default=0, minimum=0) if experts else 0
    if wide_shared:  # Qwen2-MoE: one wide shared expert
        shared_inter, n_shared = wide_shared, 1
    moe_layers = _moe_layer_count(r, layers, first_k) if experts else 0
    window, sliding = _sliding_layers(r, layers)
    quant = _read_quant(r, experts)

    # --- attention parameters per layer
    kv_lora = r.int("kv_lora_rank", default=0, minimum=0)
    mla = {}
    if kv_lora:
        q_lora = r.int("q_lora_rank", default=0, minimum=0)
        rope = r.int("qk_rope_head_dim")
        nope = r.int("qk_nope_head_dim")
        v_dim = r.int("v_head_dim")
        q_out = heads * (nope + rope)
        q = hidden * q_lora + q_lora * q_out if q_lora else hidden * q_out
        kv_a = hidden * (kv_lora + rope)
        kv_b = kv_lora * heads * (nope + v_dim)
        o = heads * v_dim * hidden
        q_a = hidden * q_lora + q_lora if q_lora else 0  # q down-projection and its norm (replicated)
        attn_sharded, kv_proj = kv_b + o + (q - hidden * q_lora), 0
        attn_replicated = kv_a + kv_lora + q_a  # kv_a projection and its norm are replicated too
        attn_matmul = q + kv_a + kv_b + o
        q_mats = [(q_out, q_lora)] if q_lora else [(q_out, hidden)]
        attn_mats = [*q_mats, (heads * (nope + v_dim), kv_lora), (hidden, heads * v_dim)]
        kv_mats: list[tuple[int, int]] = []
        repl_mats = [(kv_lora + rope, hidden)] + ([(q_lora, hidden)] if q_lora else [])
        mla = dict(
            kv_lora_rank=kv_lora,
            q_lora_rank=q_lora,
            qk_rope_head_dim=rope,
            qk_nope_head_dim=nope,
            v_head_dim=v_dim,
        )
    else:
        qkv_bias = r.bool("attention_bias", default=model_type in ("qwen2", "qwen2_moe"))
        o_bias = r.bool("attention_bias", default=False)
        q = hidden * heads * head_dim + (heads * head_dim if qkv_bias else 0)
        kv_proj = 2 * (hidden * kv_heads * head_dim + (kv_heads * head_dim if qkv_bias else 0))
        o = heads * head_dim * hidden + (hidden if o_bias else 0)
        sinks = heads if model_type == "gpt_oss" else 0  # gpt-oss: one learned attention sink per head
        attn_sharded, attn_replicated = q + o + sinks, 0
        attn_matmul = hidden * heads * head_dim * 2 + 2 * hidden * kv_heads * head_dim
        attn_mats = [(heads * head_dim, hidden), (hidden, heads * head_dim)]
        kv_mats, repl_mats = [(kv_heads * head_dim, hidden)] * 2, []
    qk_norm = 2 * head_dim if model_type.startswith("qwen3") else 0
    layer_replicated = 2 * hidden + qk_norm + attn_replicated

    # --- MLP parameters
    mlp_bias = r.bool("mlp_bias", default=False)
    dense_mlp = 3 * hidden * dense_inter + ((2 * dense_inter + hidden) if mlp_bias else 0)
    expert = 3 * hidden * moe_inter + ((2 * moe_inter + hidden) if model_type == "gpt_oss" else 0)
    router = hidden * experts + (experts if model_type == "gpt_oss" else 0)
    shared = 3 * hidden * shared_inter
    embed = vocab * hidden
    tied = r.bool("tie_word_embeddings", default=False)
    widths = _widths(
        quant,
        dtype,
        layers,
        {
            "attn": (attn_sharded, attn_mats),
            "kv": (kv_proj, kv_mats),
            "replicated": (layer_replicated, repl_mats),
            "mlp": (dense_mlp, _mlp_mats(hidden, dense_inter)),
            "expert": (expert, _mlp_mats(hidden, moe_inter)),
            "shared": (shared, _mlp_mats(hidden, shared_inter)),
            "router": (router, [(experts, hidden)]),
            "lm_head": (0 if tied else embed, [(vocab, hidden)]),
        },
    )

    active_matmul = (
        layers * attn_matmul
        + (layers - moe_layers) * 3 * hidden * dense_inter
        + moe_layers * (top_k * 3 * hidden * moe_inter + shared + hidden * experts)
    )
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=dense_inter,
        vocab_size=vocab,
        max_position_embeddings=context,
        dtype_bytes=dtype,
        tie_word_embeddings=tied,
        num_experts=experts,
        experts_per_token=top_k,
        num_shared_experts=n_shared,
        moe_intermediate_size=moe_inter,
        num_moe_layers=moe_layers,
        first_k_dense_replace=first_k,
        kv_cache_bytes=quant.kv_bytes,
        quant_method=quant.method,
        sliding_window=window,
        num_sliding_layers=sliding,
        attn_sharded_params=attn_sharded,
        kv_proj_params=kv_proj,
        layer_replicated_params=layer_replicated,
        dense_mlp_params=dense_mlp,
        expert_params=expert,
        shared_expert_params=shared,
        router_params=router,
        embed_params=embed,
        lm_head_params=0 if tied else embed,
        final_norm_params=hidden,
        active_matmul_params=active_matmul,
        **widths,
        **mla,
    )


# ---- the catalog --------------------------------------------------------------------------------

# catalog name -> shipped config file (distsim/catalog/data/models/). Llama-3.1-70B uses the Instruct
# config: base and Instruct share the architecture.
_MODEL_FILES = {
    "llama-3.1-8b": "Llama-3.1-8B.json",
    "llama-3.1-8b-instruct": "Llama-3.1-8B-Instruct.json",
    "llama-3.1-70b": "Llama-3.1-70B-Instruct.json",
    "mixtral-8x7b": "Mixtral-8x7B-v0.1.json",
    "qwen2.5-7b": "Qwen2.5-7B-Instruct.json",
    "qwen3-30b-a3b": "Qwen3-30B-A3B.json",
    "deepseek-v2-lite": "DeepSeek-V2-Lite.json",
    "gpt-oss-20b": "gpt-oss-20b.json",
    "codellama-34b": "CodeLlama-34b-hf.json",
}
MODEL_NAMES: tuple[str, ...] = tuple(_MODEL_FILES)
# Also accepted: the file stems and HF repo ids, case-insensitive.
_MODEL_ALIASES = {
    **{f.removesuffix(".json").lower(): n for n, f in _MODEL_FILES.items()},
    "llama-3.1-70b-instruct": "llama-3.1-70b",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b",
    "codellama-34b-instruct-hf": "codellama-34b",
    "codellama-34b-python-hf": "codellama-34b",
}


def _canonical_model_name(name: str) -> str | None:
    key = name.strip().lower()
    key = key.rsplit("/", 1)[-1] if "/" in key and not key.endswith(".json") else key
    if key in _MODEL_FILES:
        return key
    return _MODEL_ALIASES.get(key)


@cache
def _load_catalog_model(name: str) -> ModelSpec:
    cfg, _, where = _config_of(name, "cluster.model")
    return model_from_hf_config(cfg, name, where)


def load_model(name_or_path: str, key: str = "cluster.model") -> ModelSpec:
    """A catalog model by name (case-insensitive), or any HF config.json by path (file or its folder)."""
    text = str(name_or_path)
    canonical = _canonical_model_name(text)
    if canonical is not None and not Path(text).expanduser().exists():
        return _load_catalog_model(canonical)
    cfg, name, where = _config_of(text, key)
    spec = model_from_hf_config(cfg, name, where, key)
    generation = read_generation_defaults(Path(where).parent / GENERATION_CONFIG)
    return replace(spec, generation_defaults=generation) if generation else spec


def load_head_model(name_or_path: str, key: str = "cluster.model") -> ModelSpec:
    """One decoder layer of ``name_or_path``'s architecture, with its embedding and LM head: a speculative
    head (an EAGLE head, DeepSeek-V3's MTP module) as the step models price it."""
    cfg, name, where = _config_of(str(name_or_path), key)
    cfg = dict(cfg)
    node = cfg.get("text_config")
    if isinstance(node, dict) and "num_hidden_layers" in node:  # a multimodal config's language model
        cfg["text_config"] = node = dict(node)
    else:
        node = cfg
    node["num_hidden_layers"] = 1
    for lists in ("layer_types", "mlp_only_layers"):  # per-layer lists: the first layer's entry
        if isinstance(node.get(lists), list):
            node[lists] = node[lists][:1]
    if node.get("first_k_dense_replace"):  # DeepSeek's MTP module is a MoE block
        node["first_k_dense_replace"] = 0
    return model_from_hf_config(cfg, f"{name} (1-layer head)", where, key)


def _config_of(text: str, key: str) -> tuple[dict[str, Any], str, str]:
    """The HF config a model name or path names, its model name and where it came from."""
    path = Path(text).expanduser()
    canonical = _canonical_model_name(text)
    if canonical is not None and not path.exists():
        ref = resources.files("distsim.catalog").joinpath("data", "models", _MODEL_FILES[canonical])
        with resources.as_file(ref) as file:
            return read_config_file(file), canonical, _MODEL_FILES[canonical]
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        name = path.parent.name if path.name == "config.json" else path.stem
        return read_config_file(path), name, str(path)
    raise ConfigError(
        key, f"unknown model {text!r}; known: {', '.join(MODEL_NAMES)}; or give a path to a config.json"
    )


GENERATION_CONFIG = "generation_config.json"  # a Hugging Face snapshot's sampling defaults
GENERATION_KEYS = ("temperature", "top_p", "top_k")  # what picks vLLM's sampling path


def read_generation_defaults(path: Path) -> tuple[tuple[str, float], ...]:
    """The sampling defaults of a model folder's generation_config.json (() when there is none): vLLM's
    ``--generation-config auto`` (its default) applies them to every request that sets none, so they pick
    the sampler's path (instance/latency/serving.py). A value that is not a number is the file's error."""
    if not path.is_file():
        return ()
    data = inputs.read_json(path, what="a JSON object (a Hugging Face generation_config.json)")
    out = []
    for key in GENERATION_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise InputFileError(path, f"'{key}' must be a number (got {excerpt(value)})")
        out.append((key, float(value)))
    return tuple(out)


def model_config(name_or_path: str, key: str = "cluster.model") -> dict[str, Any]:
    """The config.json dict that :func:`load_model` reads for ``name_or_path`` (a catalog model's shipped
    file, or the given file or folder's config.json): what a profile copies beside its tables."""
    load_model(str(name_or_path), key)  # the same refusals as a model that is run
    return _config_of(str(name_or_path), key)[0]
