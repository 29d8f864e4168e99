"""A run's tables are written without pandas (distsim.metrics.columns) into the very bytes pandas'
``to_parquet`` writes, and read back as the same DataFrames."""

from __future__ import annotations

import pandas as pd
import pytest

from distsim import load_config, simulate
from distsim.metrics import columns
from distsim.metrics.columns import Table

SMALL = ["workload.num_requests=200"]
CASES = {
    "default": [],
    "nothing arrives": ["workload.num_requests=0"],
    "rejections": ["policy=reject_all"],
    "slo classes and tenants": ["workload=multi_tenant"],
    "horizon": ["sim.horizon_s=2"],
    "data parallel": ["cluster.engine.data_parallel_size=2", "cluster.instances=2"],
    "cpu kv tier": ["cluster.engine.cpu_kv_blocks=2000"],
    "p/d": ["cluster=pd_disagg"],
}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def result(request):
    return simulate(load_config([*SMALL, *CASES[request.param]]))


def test_the_tables_are_written_in_pandas_own_bytes(result, tmp_path):
    for name, table in (("requests", result.request_table), ("instances", result.instance_table)):
        assert isinstance(table, Table)
        ours, theirs = tmp_path / f"{name}.ours.parquet", tmp_path / f"{name}.pandas.parquet"
        columns.write_parquet(ours, table)
        table.to_pandas().to_parquet(theirs, index=False, engine="pyarrow")
        assert ours.read_bytes() == theirs.read_bytes(), name
        if len(table):  # (pandas reads an empty categorical back without its categories, from its own file too)
            pd.testing.assert_frame_equal(pd.read_parquet(ours), table.to_pandas())


def test_the_dataframes_are_built_once_and_written_from_them_afterwards(tmp_path):
    result = simulate(load_config(SMALL))
    result.write(tmp_path / "table")
    frame = result.requests
    assert result.requests is frame and isinstance(result.request_table, pd.DataFrame)
    result.write(tmp_path / "frame")
    for name in ("requests.parquet", "instances.parquet", "summary.json"):
        assert (tmp_path / "table" / name).read_bytes() == (tmp_path / "frame" / name).read_bytes(), name


def test_older_pandas_gets_its_files_from_pandas(monkeypatch, tmp_path):
    result = simulate(load_config(SMALL))
    monkeypatch.setattr(columns, "_pandas_version", lambda: ("2.2.3", 2))
    monkeypatch.setattr(columns, "to_arrow", lambda *a: pytest.fail("the direct writer ran"))
    columns.write_parquet(tmp_path / "r.parquet", result.request_table)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r.parquet"), result.requests)


def test_a_table_checks_its_columns():
    t = Table().add("a", [1, 2], "int64")
    with pytest.raises(ValueError, match="rows"):
        t.add("b", [1.0], "float64")
    with pytest.raises(ValueError, match="kind"):
        t.add("c", [1, 2], "uint8")
    t.add("s", ["x", None], "string").add("k", [1, 0], "category", ["no", "yes"])
    frame = t.to_pandas()
    assert list(frame.dtypes.astype(str)) == ["int64", "string", "category"]
    assert frame["k"].tolist() == ["yes", "no"] and frame["s"].isna().tolist() == [False, True]


def test_the_pandas_version_is_read_without_importing_pandas():
    from importlib import metadata

    assert columns._dist_info_version("pandas") == metadata.version("pandas")
    assert columns._pandas_version()[0] == pd.__version__
