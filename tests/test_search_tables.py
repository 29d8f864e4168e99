"""scripts/search_tables.py writes the policy search page's results (docs/guide/search.md) from a search's
tables (here a tiny fake held-out frame and candidates table), between its markers, and nowhere else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from distsim.search import holdout
from distsim.search.families import Family

ROOT = Path(__file__).parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("search_tables", ROOT / "scripts" / "search_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_search():
    families = [Family("trace", ("workload=azure_conv",)), Family("fleet", ("cluster.instances=2",))]
    policies = [("evolved", ["policy=evolved"]), ("rr", ["policy=round_robin"]), ("pa", ["policy=prefix_affinity"])]
    configs, keys = holdout.plan(families, [], policies)
    fitness = {
        ("trace", "evolved"): [1.10, 1.20, 1.30],
        ("trace", "rr"): [1.00, 1.11, 1.19],  # ~9% below: a win
        ("trace", "pa"): [0.90, 1.00, 1.10],
        ("fleet", "evolved"): [0.50, 0.60, 0.70],
        ("fleet", "rr"): [0.60, 0.71, 0.79],  # better than the evolved policy
        ("fleet", "pa"): [0.40, 0.50, 0.60],
    }
    rows = [
        {"config": " ".join(c), "seed": s, "status": "ok", "fitness": f, "ttft_ms.p99": 100.0, "tpot_ms.p99": 10.0}
        for c, k in zip(configs, keys)
        for s, f in enumerate(fitness[k])
    ]
    table = holdout.compare_families(pd.DataFrame(rows), configs, keys, "evolved")
    candidates = pd.DataFrame(
        {
            "generation": [0, 0, 0, 0],
            "candidate": [0, 0, 1, 1],
            "overrides": ["policy.routing.load_guard=3"] * 2 + ["policy.routing.load_guard=7"] * 2,
            "family": ["chat", "prefix"] * 2,
            "family_score": [0.01, 0.03, 0.05, 0.07],
            "train_score": [0.02, 0.02, 0.06, 0.06],
        }
    )
    search = {
        "algorithm": "cmaes",
        "reference": "weighted",
        "train_seeds": [0, 1],
        "holdout_seeds": [100, 101, 102],
        "train": {"chat": "workload=default", "prefix": ["workload=prefix_heavy"]},
        "holdout": {"trace": "workload=azure_conv", "fleet": "cluster.instances=2"},
        "scenario_overrides": ["workload.num_requests=100"],
    }
    return table, candidates, search


def test_the_section_reports_training_and_every_held_out_family():
    text = _script().section(*fake_search())
    assert "`workload.num_requests=100`" in text  # the command line's overrides are said
    assert "Best: +0.0600 (generation 1), `policy.routing.load_guard=7`" in text
    assert "| chat | `workload=default` | +5.0% |" in text and "| prefix | `workload=prefix_heavy` | +7.0% |" in text
    assert "on 1 of 2 held-out families, and significantly worse than some built-in on 1." in text
    assert "| trace | 1.200 | rr 1.100 | +9.1% |" in text
    assert "Held-out family **fleet**: `cluster.instances=2`" in text and "| rr (best built-in) |" in text


def test_the_section_goes_between_the_markers_and_nowhere_else(tmp_path):
    script = _script()
    readme = tmp_path / "search.md"
    readme.write_text(f"# title\n\nbefore\n{script.BEGIN}\nold table\n{script.END}\nafter\n", encoding="utf-8")
    text = script.section(*fake_search())
    script.replace_block(readme, text, script.BEGIN, script.END)
    body = readme.read_text(encoding="utf-8")
    assert body.startswith("# title\n\nbefore\n") and body.endswith(f"{script.END}\nafter\n")
    assert "old table" not in body and text in body
    script.replace_block(readme, text, script.BEGIN, script.END)  # the same tables: the same file
    assert readme.read_text(encoding="utf-8") == body
    readme.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no .*search_tables.py"):
        script.replace_block(readme, text, script.BEGIN, script.END)


def test_a_directory_that_is_not_a_finished_search_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no holdout.csv"):
        _script().read_search(tmp_path)


def test_a_pareto_search_reports_the_front_and_every_built_ins_point():
    table, candidates, search = fake_search()
    candidates["on_front"] = candidates["candidate"] == 0  # the front's best, not the best overall
    search["objectives"] = ["ttft_p99_ms", "tpot_p99_ms"]
    pareto = pd.DataFrame(
        {
            "kind": ["candidate", "candidate", "baseline", "baseline"],
            "on_front": [True, False, None, None],
            "label": ["a", "b", "weighted", "round_robin"],
            "ttft_p99_ms": [-0.10, 0.05, 0.0, 0.20],
            "tpot_p99_ms": [-0.01, 0.02, 0.0, -0.05],
            "train_score": [0.02, 0.06, 0.0, -0.30],
            "covered": [None, None, True, False],
        }
    )
    text = _script().section(table, candidates, search, pareto)
    assert "Best: +0.0200 (generation 1), `policy.routing.load_guard=3`" in text
    assert "1 of 2 candidates on the first front over ttft_p99_ms, tpot_p99_ms" in text
    assert "matches or dominates 1 of 2 built-ins' points" in text
    assert "| weighted | +0.0% | +0.0% | +0.0% | yes |" in text and "| round_robin | +20.0% | -5.0% | -30.0% | no |" in text


def test_the_page_it_writes_holds_its_markers_once(tmp_path):
    """A dry run on a copy of the real page: the block is found, replaced, and the rest kept."""
    script = _script()
    page = tmp_path / "search.md"
    original = script.PAGE.read_text(encoding="utf-8")
    assert original.count(script.BEGIN) == 1 and original.count(script.END) == 1
    page.write_text(original, encoding="utf-8")
    script.replace_block(page, "new tables", script.BEGIN, script.END)
    body = page.read_text(encoding="utf-8")
    assert f"{script.BEGIN}\nnew tables\n{script.END}" in body
    assert body.split(script.BEGIN)[0] == original.split(script.BEGIN)[0]
    assert body.split(script.END)[1] == original.split(script.END)[1]


def test_the_capacity_goal_table_puts_the_oracle_and_the_roofline_beside():
    spec = importlib.util.spec_from_file_location("search_capacity", ROOT / "scripts" / "search_capacity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table, _, search = fake_search()
    search["reference"] = "rr"
    oracle = pd.DataFrame({"family": ["trace", "trace", "fleet"], "seed": [100, 101, 100],
                           "oracle": [1.3, 1.5, 0.9], "roofline": [4.0, 4.0, 2.0]})  # fmt: skip
    text = "\n".join(module.goal_lines(table, oracle, search, train_score=0.06))
    assert "on 1 of 2 held-out families, and significantly worse than some built-in on 1." in text
    assert "training score +6.0%" in text and "+9.1% on the named ones" not in text
    assert "| trace | 1.200 | rr 1.100 | +9.1% [" in text and "| 1.400 | 4.000 |" in text
    assert "| trace | 1.100 | 1.000 |" in text  # every built-in's mean
