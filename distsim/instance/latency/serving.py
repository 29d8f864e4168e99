"""vLLM's serving layer around the kernels: what an engine step costs besides one GPU's kernels.

The step tables (``../shared/data/h100_steps``) time a stand-in's kernels; vLLM's server adds, per step,
one term per mechanism, each switched by a ``cluster.latency.serving`` key and reported by
:meth:`ServingLayer.terms` (the step breakdown, instances.parquet's totals, the timeline's step args).
Every threshold below is vLLM's, cited in docs/data/serving_sources.md:

- **CUDA-graph padding** (``cuda_graphs``): a batch of T tokens up to the largest captured size runs the
  graph of the next captured size (decode-only batches a full graph, mixed batches piecewise: the
  matmuls and elementwise kernels inside the graph, attention outside it); the padded rows cost what
  real rows cost in the matmuls and the per-token kernels. The logits are computed outside the graph,
  on the sampled rows only. Captured sizes: 1, 2, 4, then every 8 below 256, then every 16, up to
  min(2 max_num_seqs, 512) and at most max_num_batched_tokens (vllm/config/vllm.py); with k speculative
  tokens each is rounded up to a multiple of k + 1 (vllm/config/compilation.py). A batch above the
  largest size (or every batch, with graphs off) runs eagerly: the GPU idles between kernels shorter
  than their launch, ``eager_layer_overhead_us`` per layer (an H100's decode stack eager against its
  graph replay at 257-512 rows, docs/data/h100_serving).
- **Collectives by message size, TP degree and path** (``custom_all_reduce``): each TP all-reduce of
  T x hidden activations on the path vLLM picks for it (custom one-shot or two-shot below 8 MiB with
  peer-to-peer access, NCCL's ring beyond it, NCCL over PCIe or through host memory without P2P), each
  path's terms fitted on public H100 profiles: :mod:`distsim.instance.latency.allreduce`.
- **vLLM's fused MoE** (``fused_moe``): the step tables' MoE layers are a PyTorch stand-in whose router,
  top-k, counting sort, row gather and combine launch 14.1 kernels per MoE layer beyond a dense layer's
  (:data:`STAND_IN_MOE_EXTRA_KERNELS`, their profiles); vLLM's fused_moe path launches 4 beyond a dense
  MLP's (the router GEMM, ``topk_softmax``, ``moe_align_block_size``, ``moe_sum``: its token gather
  and the routing weights live inside the two Triton GEMMs; vllm/model_executor/layers/fused_moe/
  fused_moe.py, ``fused_topk`` and ``TritonExperts.apply``). The per-MoE-layer overhead the tables fit
  (``moe_layer_overhead_us``: launch- and latency-bound small kernels) is priced at that share,
  :data:`FUSED_MOE_SHARE`; it is per GPU, the same on every TP or EP shard (each GPU routes every token
  and launches the same kernels on its shard of the experts).
- **Host work** (``host_overlap``): the engine's per-step and per-sequence CPU time (scheduling, input
  preparation, output processing). With async scheduling vLLM prepares step N+1 while step N runs on
  the GPU, so the host time is hidden unless it exceeds the GPU's; only the excess adds. Without, it
  adds in full. The GPU time it is compared with is the step's context-free part (matmuls, per-token
  and per-layer kernels, collectives, padding, sampling: no attention), so that a decode batch's terms
  are one table by batch size; the attention can only hide more.
- **Sampling** (``sampler``): the sampler's passes over each sampled row's logits (float32
  conversion, temperature, softmax, a sort for top-k/top-p), priced as bytes per logit at the memory
  bandwidth over (rows + ``sampler_extra_rows``) rows, plus ``sampler_call_us`` per step; the three
  measured per path (:data:`SAMPLERS`) unless set. ``auto`` takes the path the model's own sampling
  defaults select (:func:`sampler_path`): vLLM applies a model's generation_config.json to every request
  that sets no sampling parameters (``--generation-config auto``, its default), a top-p or top-k there
  sorts every row (vLLM's PyTorch-native path: its FlashInfer sampler is opt-in from 0.11 until 2026),
  a temperature of 0 is greedy, none of them the temperature path.

Detokenisation and streaming run in the API server process, beside the engine: they delay each token
on its way to the client (``cluster.frontend.per_output_token_us``), not the engine's steps.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from distsim.errors import ConfigError
from distsim.instance.latency.allreduce import NCCL_PCIE, NCCL_RING, all_reduce_us

INTERCONNECTS = ("nvlink", "pcie")
# kernels a MoE layer launches beyond a dense layer's in the step tables' stand-in: a least-squares split
# of the kernel counts of decode B=1 in profile_{llama-3.1-8b,qwen2.5-7b,mixtral-8x7b-8layers,
# qwen3-30b-a3b}.csv into a per-step part and per-layer parts (scripts/fused_moe_kernels.py)
STAND_IN_MOE_EXTRA_KERNELS = 14.1
# and in vLLM's fused_moe path beyond a dense MLP's gate_up, SiLU-and-mul and down: the router GEMM,
# topk_softmax, moe_align_block_size, moe_sum (vllm/model_executor/layers/fused_moe/fused_moe.py)
FUSED_MOE_EXTRA_KERNELS = 4
FUSED_MOE_SHARE = FUSED_MOE_EXTRA_KERNELS / STAND_IN_MOE_EXTRA_KERNELS
# vLLM's sampling paths measured on an H100 (scripts/sampler_fit.py --op OP on
# docs/data/h100_serving/run2/sampling.csv): (sampler_call_us, sampler_bytes_per_logit, sampler_extra_rows).
# Which one a request takes follows its sampling parameters, which default to the model's
# generation_config.json (vLLM's --generation-config auto): top-k/top-p sort the logits of every row.
SAMPLERS: dict[str, tuple[float, float, float]] = {
    "temperature": (14.09, 49.09, 18.7),  # random_exp: softmax, exponential draw, argmax
    "top_k_top_p": (105.75, 377.67, 13.15),  # topk_topp_sort: PyTorch's sort of each row, then the draw
    "greedy": (8.34, 11.66, 20.6),  # argmax
}
# cluster.latency.serving.sampler: a measured path, or auto (the model's generation defaults pick it)
SAMPLER_CHOICES = (*SAMPLERS, "auto")
GREEDY_TEMPERATURE = 1e-5  # vllm/v1/sample/sampler.py: below it a request samples greedily


@dataclass(frozen=True)
class ServingSettings:
    """``cluster.latency.serving``: each mechanism on or off, and the GPU link the collectives take."""

    cuda_graphs: bool = True
    custom_all_reduce: bool = True
    host_overlap: bool | None = None  # null: engine.async_scheduling
    interconnect: str | None = None  # nvlink | pcie; null: nvlink when the GPU link beats the host link
    p2p: bool = True  # GPU peer-to-peer access (PCIe consumer cards may lack it)
    fused_moe: bool = True  # MoE layers as vLLM's fused_moe runs them (FUSED_MOE_SHARE of the stand-in's overhead)
    sampler: str = "auto"  # the sampling path (SAMPLERS: its measured terms unless set); auto: the model's defaults


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, speculative_tokens: int = 0) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes for these engine settings (vllm/config/vllm.py). Under
    speculative decoding with k drafts vLLM rounds each size up to a multiple of k + 1 and drops those past
    the largest (CompilationConfig.adjust_cudagraph_sizes_for_spec_decode, vllm/config/compilation.py): a
    verify batch of b sequences has b (k + 1) rows."""
    top = min(min(2 * max_num_seqs, 512), max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top]
    sizes += range(8, min(top + 1, 256), 8)
    sizes += range(256, top + 1, 16)
    q = speculative_tokens + 1
    if q > 1 and sizes:
        sizes = sorted({r for r in (-(-s // q) * q for s in sizes) if r <= top}) or ([q] if q <= top else [])
    return tuple(sizes)


def settings_from(cfg: Any, key: str = "cluster.latency.serving") -> ServingSettings:
    """The settings a ``cluster.latency.serving`` node sets (defaults for missing or null keys)."""
    node = cfg.get("serving") if cfg is not None else None
    if node is None:
        return ServingSettings()
    out = {}
    for name in ("cuda_graphs", "custom_all_reduce", "host_overlap", "p2p", "fused_moe"):
        value = node.get(name)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise ConfigError(f"{key}.{name}", f"must be true or false (got {value!r})")
        out[name] = value
    for name, allowed in (("interconnect", INTERCONNECTS), ("sampler", SAMPLER_CHOICES)):
        value = node.get(name)
        if value is not None:
            if value not in allowed:
                raise ConfigError(f"{key}.{name}", f"must be one of {', '.join(allowed)} (got {value!r})")
            out[name] = value
    return ServingSettings(**out)


@cache
def _generation_defaults() -> dict[str, dict[str, Any]]:
    ref = resources.files("distsim.catalog").joinpath("data", "generation_defaults.json")
    return json.loads(ref.read_text(encoding="utf-8"))["models"]


def generation_defaults(model_name: str) -> dict[str, Any] | None:
    """The sampling defaults of a model's generation_config.json (catalog data), or None when unknown."""
    key = model_name.strip().lower()
    table = _generation_defaults()
    return table.get(key) or table.get(key.rsplit("/", 1)[-1])


def sampler_path(sampler: str, model_name: str, own: dict[str, Any] | None = None) -> str:
    """The sampling path a step takes: ``sampler`` itself, or for ``auto`` the one the model's
    generation defaults select when requests set no sampling parameters (vLLM's Sampler: greedy below
    a temperature of 1e-5, a top-k/top-p filter, a sort of every row, when top_p < 1 or top_k > 0,
    else plain temperature sampling; a model without defaults samples at vLLM's temperature 1). ``own``:
    the defaults of the model folder's own generation_config.json, ahead of the catalog's table."""
    if sampler != "auto":
        return sampler
    gen = own or generation_defaults(model_name) or {}
    if float(gen.get("temperature", 1.0)) < GREEDY_TEMPERATURE:
        return "greedy"
    if float(gen.get("top_p", 1.0)) < 1.0 or int(gen.get("top_k", 0)) > 0:
        return "top_k_top_p"
    return "temperature"


class ServingLayer:
    """The serving terms of one engine (a model on ``tp`` GPUs) as tables by token count."""

    def __init__(self, settings: ServingSettings, ctx: Any, custom_latency_us: float, async_scheduling: bool,
                 custom_link_efficiency: float = 1.0, two_shot_us: float = 0.0,
                 nccl_ring: tuple[float, float, float] = NCCL_RING, nccl_pcie: tuple[float, float] = NCCL_PCIE):
        m, hw, tp = ctx.model, ctx.hardware, ctx.tensor_parallel_size
        self.settings = settings
        self.overlap = async_scheduling if settings.host_overlap is None else settings.host_overlap
        link = settings.interconnect or ("nvlink" if hw.link_gbps_per_dir > hw.host_link_gbps_per_dir else "pcie")
        self.nvlink = link == "nvlink"
        self._ar = (tp, hw.link_gbps_per_dir, self.nvlink, settings.p2p, settings.custom_all_reduce,
                    custom_latency_us, hw.host_link_gbps_per_dir, custom_link_efficiency, two_shot_us,
                    nccl_ring, nccl_pcie)
        self._ar_bytes = m.hidden_size * 2  # activations are bf16 (FP8 checkpoints too)
        self._n_ar = 2 * m.num_layers if tp > 1 else 0
        self.sizes = (
            capture_sizes(ctx.max_num_seqs, ctx.max_num_batched_tokens, ctx.speculative_tokens)
            if settings.cuda_graphs else ()
        )
        self._comm: dict[int, float] = {}

    def captured(self, tokens: int) -> bool:
        """Whether a batch of ``tokens`` runs in a CUDA graph (else eagerly, with launch gaps)."""
        sizes = self.sizes
        return bool(sizes) and tokens <= sizes[-1]

    def padded(self, tokens: int) -> int:
        """The rows a batch of ``tokens`` runs at: the next captured size, or itself above the largest."""
        sizes = self.sizes
        if not sizes or tokens > sizes[-1] or tokens <= 0:
            return tokens
        return sizes[bisect_left(sizes, tokens)]

    def collectives_us(self, tokens: int) -> float:
        """The TP all-reduces of one step of ``tokens`` rows (two per layer)."""
        got = self._comm.get(tokens)
        if got is None:
            got = self._comm[tokens] = self._n_ar * all_reduce_us(tokens * self._ar_bytes, *self._ar) if self._n_ar else 0.0
        return got
