"""KV admission on the RTX 4090 run: does the simulated engine hold the KV cache vLLM had, and does the
real engine preempt where the simulated one does?

Printed: vLLM's KV blocks (the run's meta.json) beside the blocks distsim derives from the datasheet
memory (gpu_memory_utilization less weights less ``activation_reserve_fraction`` of memory), the
reserve the measured blocks imply, the replay's preemptions (at the measured blocks, which a replay
uses), and the engine's own sign of preemption: its per-second running count (a preempted request
counts as waiting there) below the requests scheduled and not finished.

    python scripts/fidelity_kv_admission.py      # a few seconds
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from distsim.catalog import load_hardware, load_model
from distsim.catalog.capacity import derive_total_kv_blocks
from distsim.fidelity.occupancy import occupancy
from distsim.fidelity.readers import read_run
from distsim.fidelity.replay import replay, replay_config

RUN = Path(__file__).resolve().parents[2] / "shared" / "data" / "llmservingsim_bench" / "RTX4090_Llama-3.1-8B"


def main() -> None:
    run = read_run(RUN)
    meta = json.loads((RUN / "meta.json").read_text())
    cfg = replay_config(run)
    model, hw = load_model(run.model), load_hardware(run.hardware)
    engine = OmegaConf.create(OmegaConf.to_container(cfg.cluster.engine, resolve=True))
    engine.total_kv_blocks = None
    derived = derive_total_kv_blocks(model, hw, engine)
    measured = int(meta["kv_cache"]["num_gpu_blocks"])
    memory = int(meta["hardware"]["device_total_memory_bytes"])
    util = float(meta["kv_cache"]["gpu_memory_utilization"])
    kv = measured * engine.block_size * model.kv_bytes_per_token
    implied = (memory * util - model.weight_bytes_per_gpu(1) - kv) / memory
    print(f"KV blocks: vLLM {measured}, derived {derived} ({(derived - measured) / measured * 100:+.1f}%); "
          f"reserve implied by vLLM's blocks {implied:.4f} of memory (shipped {engine.activation_reserve_fraction:g})")
    result = replay(run, cfg)
    print(f"replay at the measured blocks: {result.summary['requests']['preemptions']} preemptions of "
          f"{result.summary['requests']['preempted']} requests")
    req, ts = run.requests, run.timeseries
    t_ms = ts["t_s"].to_numpy() * 1000.0
    scheduled, _ = occupancy(req["arrival_ms"], req["scheduled_ms"], req["completion_ms"], t_ms)
    gap = scheduled - ts["running"].to_numpy()
    print(f"engine: running below scheduled-and-unfinished by >= 5 in {int((gap >= 5).sum())} of {len(gap)} "
          f"seconds, by {int(gap.max())} at most (t = {ts['t_s'].to_numpy()[int(np.argmax(gap))]:.0f} s): "
          f"requests the engine had preempted")


if __name__ == "__main__":
    main()
