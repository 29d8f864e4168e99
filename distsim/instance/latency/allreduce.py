"""One tensor-parallel all-reduce's time by message size, TP degree and path: the path vLLM's
communicator picks for the message, then that path's cost model, its terms fitted on public profiles
(``python scripts/allreduce_fit.py`` writes docs/data/allreduce_fit.json; the constants here are its
output, checked by tests/test_allreduce_model.py).

Which path (vLLM; docs/data/serving_sources.md cites each line):

- **custom one-shot** (``csrc/custom_all_reduce.cuh``, ``cross_device_reduce_1stage``): two GPUs, or
  fully NVLink-connected groups of up to four below 512 KiB and up to eight below 256 KiB. A start
  barrier, then every GPU reads the whole message from each of its ``tp - 1`` peers and sums:
  ``latency + (tp - 1) bytes / peer``.
- **custom two-shot** (``cross_device_reduce_2stage``): larger messages under 8 MiB on fully connected
  groups. Reduce-scatter (each GPU reads its 1/tp slice from every peer), a barrier, all-gather (reads
  the peers' reduced slices): ``latency + two_shot_us + 2 (tp - 1) / tp bytes / peer``; the barrier
  between the stages is ``two_shot_us``. (vLLM 0.11+ with symmetric memory on an H100 sends TP 6 and 8
  messages above 512 / 256 KiB to PyTorch's symmetric-memory all-reduce instead; no profile times it, so
  the two-shot prices them: docs/data/serving_sources.md.)
- **NCCL ring** on NVLink (messages of 8 MiB and more, TP degrees vLLM's kernel lacks, or the custom
  all-reduce off): the ring all-reduce's 2 (tp - 1) steps, each moving bytes / tp, at the bus bandwidth
  (NCCL's nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2 (n - 1) / n):
  ``fixed + per_step (tp - 1) + 2 (tp - 1) / tp bytes / bus``.
- **NCCL over PCIe** with peer-to-peer, and **through host memory** without it (half the host link:
  each byte crosses the host link twice).

``peer`` is ``custom_link_efficiency`` x the GPU's link per direction: vLLM's kernel runs 36 blocks of
512 threads, which read their peers' buffers well below the link (the profile: 64 GB/s on an H100's
450 GB/s NVLink). The custom path's fixed ``latency`` inside a CUDA graph is the step model's
``all_reduce_latency_us`` (the profile was timed outside one: its 8.75 us holds the input copy and the
launch a graph replay does not pay).
"""

from __future__ import annotations

# vllm/distributed/device_communicators/custom_all_reduce.py: max_size=8192 * 1024, world sizes 2, 4, 6, 8
CUSTOM_AR_MAX_BYTES = 8192 * 1024
CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)
# csrc/custom_all_reduce.cuh: one-shot below these sizes when fully connected (two GPUs: always)
ONE_SHOT_MAX_BYTES = ((4, 512 * 1024), (8, 256 * 1024))

# Fitted by scripts/allreduce_fit.py (docs/data/allreduce_fit.json):
# vLLM's custom all-reduce on an H100 by world size 2/4/8 and 512 B-1 MiB (docs/data/
# vllm_custom_allreduce_h100.csv, from sglang PR #2904): fixed us outside a graph, the two-shot's
# barrier between its stages (us), and the peer reads' bandwidth (GB/s) over the H100's link
CUSTOM_PROFILE_FIXED_US = 8.747
CUSTOM_TWO_SHOT_US = 7.212
CUSTOM_PEER_GBPS = 64.08
H100_LINK_GBPS = 450.0
CUSTOM_LINK_EFFICIENCY = round(CUSTOM_PEER_GBPS / H100_LINK_GBPS, 4)
# NCCL's ring on an H100 DGX by workers 2/4/8, messages of 8-64 MiB (Vidur's h100_dgx_all_reduce.csv):
# (fixed us, us per ring step, bus bandwidth as a fraction of the link per direction)
NCCL_RING = (21.99, 1.147, round(339.8 / H100_LINK_GBPS, 4))
# its pairwise-NVLink box's 4-GPU rows, whose all-reduce crosses PCIe: fixed us and algorithm bandwidth
# as a fraction of the PCIe link per direction it crossed (Gen5 x16, 64 GB/s)
NCCL_PCIE = (51.7, 33.2 / 64.0)

PATHS = ("custom_one_shot", "custom_two_shot", "nccl_ring", "nccl_pcie", "nccl_host")


def path(nbytes: float, tp: int, nvlink: bool, p2p: bool, custom: bool) -> str:
    """The path vLLM takes for an all-reduce of ``nbytes`` over ``tp`` GPUs (module docstring)."""
    if custom and p2p and tp in CUSTOM_AR_WORLD_SIZES and (tp == 2 or nvlink) and nbytes < CUSTOM_AR_MAX_BYTES:
        if tp == 2 or any(tp <= n and nbytes < limit for n, limit in ONE_SHOT_MAX_BYTES):
            return "custom_one_shot"
        return "custom_two_shot"
    if nvlink:
        return "nccl_ring"
    return "nccl_pcie" if p2p else "nccl_host"


def all_reduce_us(nbytes: float, tp: int, link_gbps: float, nvlink: bool, p2p: bool, custom: bool,
                  custom_latency_us: float, host_link_gbps: float, custom_link_efficiency: float = 1.0,
                  two_shot_us: float = 0.0, nccl_ring: tuple[float, float, float] = NCCL_RING,
                  nccl_pcie: tuple[float, float] = NCCL_PCIE) -> float:
    """One all-reduce of ``nbytes`` over ``tp`` GPUs on the path :func:`path` picks; ``nccl_ring`` and
    ``nccl_pcie`` are NCCL's terms (default: the H100 profiles' fit, a user's GPU profile may fit its own)."""
    if tp <= 1 or nbytes <= 0:
        return 0.0
    link = link_gbps * 1e3  # bytes per us
    way = path(nbytes, tp, nvlink, p2p, custom)
    if way == "custom_one_shot":
        return custom_latency_us + (tp - 1) * nbytes / (link * custom_link_efficiency)
    if way == "custom_two_shot":
        return custom_latency_us + two_shot_us + 2.0 * (tp - 1) / tp * nbytes / (link * custom_link_efficiency)
    if way == "nccl_ring":
        fixed, per_step, bus = nccl_ring
        return fixed + per_step * (tp - 1) + 2.0 * (tp - 1) / tp * nbytes / (link * bus)
    fixed, share = nccl_pcie
    bw = link * share if way == "nccl_pcie" else host_link_gbps * 1e3 / 2.0
    return fixed + nbytes / bw
