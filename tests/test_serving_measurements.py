"""scripts/analyse_serving_h100.py: the fits recover known terms, the padding cost and the eager-minus-graph
gap are read off the right rows, and the committed summary.json is what the committed raw files give."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DATA = ROOT / "docs" / "data" / "h100_serving"


def _script():
    spec = importlib.util.spec_from_file_location("analyse_serving_h100", ROOT / "scripts" / "analyse_serving_h100.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _csv(path: Path, header: str, rows: list[tuple]) -> None:
    path.write_text(header + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows))


def _run(folder: Path, graph_scale: float) -> None:
    """A run whose every figure follows a known law, so the fits must give the law back."""
    folder.mkdir()
    env = {"date_utc": "2026-01-01T00:00:00Z", "gpu": "test", "kernels_per_step_eager_b1": 100, "layers": 4,
           "vllm_capture_sizes_max_num_seqs_256": [1, 2, 4, 8],
           "nvidia_smi": "name, driver_version\ntest, 1.0"}
    (folder / "env.json").write_text(json.dumps(env))
    rows = []
    for v in (1000, 4000):
        for b in (1, 2, 4, 8):
            for op in ("greedy", "random_multinomial"):
                rows.append((v, b, op, 0, 50.0, 10.0 + 0.002 * b * v, ""))  # 10 us + 2 ns per logit
    _csv(folder / "sampling.csv", "vocab,batch,op,eager_dev_us,eager_wall_us,graph_us,graph1_us", rows)
    _csv(folder / "lm_head.csv", "hidden,vocab,batch,dev_us,wall_us,tflops,weight_gbps",
         [(64, 1000, b, 5.0 + b, 0, 0.1, 2000.0) for b in (1, 8)])
    _csv(folder / "d2h.csv", "batch,method,wall_us", [(b, "tolist", 15.0 + 0.5 * b) for b in (1, 2, 4, 8)])
    # replay 1000 + 100 B us; eager 300 us above it; size 3 pads to 4, size 5 to 8
    _csv(folder / "graph.csv",
         "kv_len,batch,captured,padded_to,eager_dev_us,eager_wall_us,eager_enqueue_us,graph_us,graph_wall_us",
         [(64, b, int(b in (1, 2, 4, 8)), {3: 4, 5: 8}.get(b, b), graph_scale * (1300 + 100 * b), 0, 1400.0,
           graph_scale * (1000 + 100 * b), 0) for b in (1, 2, 3, 4, 5, 8)])
    _csv(folder / "loop.csv", "kv_len,batch,step_wall_us,inputs_us,launch_us,sync_tolist_us,bookkeeping_us,graph_us,"
         "lm_head_greedy_us", [(64, b, 2000.0 + 100 * b, 1, 1, 1, 1, 1000.0 + 100 * b, 900.0) for b in (1, 8)])
    _csv(folder / "host.csv", "batch,phase,us",
         [(b, ph, 40.0 + k * b) for b in (1, 2, 4, 8) for ph, k in (("step_total", 0.8), ("bookkeeping", 0.4))])


def test_fit_affine_recovers_a_line():
    f = _script().fit_affine([1, 2, 4, 8], [3.0, 5.0, 9.0, 17.0])
    assert f["a"] == pytest.approx(1.0) and f["b"] == pytest.approx(2.0)
    assert f["max_rel_err"] < 1e-9 and f["max_abs_err"] < 1e-9


def test_summary_of_known_laws(tmp_path):
    s = _script()
    _run(tmp_path / "run1", 1.0)
    _run(tmp_path / "run2", 1.02)
    out = s.analyse(tmp_path)
    fit = out["sampling"]["fit_per_logit"]["greedy"]
    assert fit["call_us"] == pytest.approx(10.0) and fit["ps_per_logit"] == pytest.approx(2000.0)
    assert "random_multinomial" not in out["sampling"]["device_us"]  # no graph: no device time
    g = out["cuda_graph"]
    # the runs' mean of 1.00 and 1.02 x (1000 + 100 B); padding 3 -> 4 costs one row's 100 us
    assert g["replay_us"]["kv64"]["1"] == pytest.approx(1.01 * 1100, abs=0.1)
    pad = {p["batch"]: p for p in g["padding"]}
    assert pad[3]["padded_to"] == 4 and pad[3]["cost_us"] == pytest.approx(101.0, abs=0.1)
    assert pad[5]["cost_us"] == pytest.approx(3 * 101.0, abs=0.1)
    assert g["eager_minus_graph_us"]["per_step_median"] == pytest.approx(303.0, abs=0.1)
    assert g["eager_minus_graph_us"]["per_layer"] == pytest.approx(303.0 / 4, abs=0.01)
    assert g["eager_minus_graph_us"]["per_kernel"] == pytest.approx(3.03, abs=0.001)
    assert g["run_spread_of_replay"]["max_rel"] == pytest.approx(0.0099, abs=1e-4)
    assert out["step_loop"]["by_batch"]["8"]["exposed_host_us"] == pytest.approx(100.0)
    host = out["host_loop"]["fit"]
    assert host["step_total"]["fixed_us"] == pytest.approx(40.0) and host["step_total"]["per_seq_us"] == 0.8
    assert out["token_copy"]["tolist"]["fit"]["per_seq_us"] == pytest.approx(0.5)
    assert out["headline"]["host_loop_per_seq_us"] == 0.8


def test_committed_summary_is_regenerated_from_the_raw_files():
    if not (DATA / "summary.json").is_file():
        pytest.skip(f"{DATA} holds no summary")
    s = _script()
    assert (DATA / "summary.json").read_text() == s.render(s.analyse(DATA))
