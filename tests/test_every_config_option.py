"""Every option of every config group composes and runs, and gives the recorded results.

Each option (a file under conf/cluster, conf/workload, conf/signals, conf/policy, conf/fitness) runs
with the defaults for the other groups on a few hundred requests. The digests in
tests/golden/config_options.json pin summary.json and the request and instance tables, so a refactor
that must not change results is checked option by option. Digests are of the content (the summary's
JSON text, pandas' row hashes with column names and dtypes), not of parquet bytes, which carry the
pyarrow version. After an intended change of results, regenerate with
``DISTSIM_WRITE_GOLDEN=1 pytest tests/test_every_config_option.py`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from distsim import load_config, simulate
from distsim.errors import ConfigWarning
from distsim.simulate import summary_json

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "config_options.json"
GROUPS = ("cluster", "workload", "signals", "policy", "fitness")
SIZE = {"workload.num_requests": 300}  # synthetic workloads
TRACE_SIZE = {"workload.max_rows": 300}
# options that need another group's option: a mix's non-LLM types need runtime pools that serve them
# policy=llmd reads its weights from an EndpointPickerConfig file (a fixture shaped like llm-d's examples)
COMPANIONS = {
    "workload=mixed_70_20_10": ["cluster=mixed_fleet"],
    "policy=llmd": [f"policy.routing.endpoint_picker={Path(__file__).parent / 'data/endpoint_picker/prefix_load.yaml'}"],
    "policy=pd_decider": ["cluster=pd_disagg"],  # a P/D decider decides only on a P/D fleet
    "workload=lora_zipf": ["cluster=lora"],  # requests that name LoRA adapters need engines that serve them
    # a sheddable class matters where admission sheds: token_limit protecting tenant 0, at a load that sheds
    "workload=tiered_sheddable": ["policy=token_limit", "policy.admission.protected_priority=2",
                                  "policy.admission.max_queued_tokens=2048", "workload.arrival.rate_rps=60"],
}
# the warnings an option gives by design (anything else it warns fails the suite): a request of the Mooncake
# synthetic trace's first 300 is longer than Llama-3.1-8B's context and is rejected, as vLLM rejects it
WARNS = {"workload=mooncake_synthetic": "1 of 300 requests have a prompt plus output longer than max_model_len"}


def options() -> list[tuple[str, str]]:
    return [(group, path.stem) for group in GROUPS for path in sorted((ROOT / "conf" / group).glob("*.yaml"))]


def _frame_digest(frame: pd.DataFrame) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([[c, str(t)] for c, t in frame.dtypes.items()]).encode())
    h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()


def run_option(group: str, name: str) -> dict[str, str]:
    option = [f"{group}={name}", *COMPANIONS.get(f"{group}={name}", [])]
    cfg = load_config(option)
    size = TRACE_SIZE if cfg.workload.kind == "trace" else SIZE
    cfg = load_config([*option, *(f"{k}={v}" for k, v in size.items())])
    if f"{group}={name}" in WARNS:
        with pytest.warns(ConfigWarning, match=WARNS[f"{group}={name}"]):
            result = simulate(cfg)
    else:
        result = simulate(cfg)
    return {
        "summary": hashlib.sha256(summary_json(result.summary).encode()).hexdigest(),
        "requests": _frame_digest(result.requests),
        "instances": _frame_digest(result.instances),
        "arrived": str(result.summary["requests"]["arrived"]),
    }


def _golden() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.parametrize("group, name", options(), ids=[f"{g}={n}" for g, n in options()])
def test_the_option_runs_and_gives_the_recorded_results(group, name):
    digest = run_option(group, name)
    assert int(digest["arrived"]) > 0
    key = f"{group}={name}"
    if os.environ.get("DISTSIM_WRITE_GOLDEN"):
        data = _golden()
        data[key] = digest
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
        return
    recorded = _golden().get(key)
    assert recorded is not None, f"no golden digest for {key}: regenerate (see the module docstring)"
    assert digest == recorded, key
