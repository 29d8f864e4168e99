"""Bad input stops in build_workload, before the first request, with the file and line or the key."""

from __future__ import annotations

import json

import pytest

from distsim.errors import ConfigError, InputFileError
from distsim.workload import build_workload

GOOD = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}


def write_jsonl(tmp_path, lines):
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def build_trace(path, fmt="mooncake", **kw):
    return build_workload(
        {"kind": "trace", "format": fmt, "path": str(path), "num_requests": None, **kw}, seed=0
    )


def later(**kw):
    return {**GOOD, "timestamp": 10, **kw}


@pytest.mark.parametrize(
    "bad, words",
    [
        ('{"timestamp": 3, "input_length": 5', "not valid JSON"),
        ({"timestamp": 3, "input_length": 5, "output_length": 1}, "missing field 'hash_ids'"),
        (later(input_length=-4, hash_ids=[]), "negative input length"),
        (later(output_length=-1), "negative output length"),
        (later(timestamp=-1), "time goes backwards"),
        (later(input_length="many"), "not an integer"),
        (later(hash_ids=[1, 2, 3]), "3 ids"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_broken_mooncake_line(tmp_path, bad, words):
    p = write_jsonl(tmp_path, [GOOD, later(), bad, later()])
    with pytest.raises(InputFileError) as err:
        build_trace(p)
    assert err.value.line == 3
    assert str(p) in str(err.value) and ":3: " in str(err.value)
    assert words in err.value.message


def test_broken_line_at_the_end_stops_before_the_first_request(tmp_path):
    lines = [dict(GOOD, timestamp=i) for i in range(5000)] + ["{oops"]
    p = write_jsonl(tmp_path, lines)
    with pytest.raises(InputFileError) as err:
        build_trace(p)  # not iterated: the error comes from building
    assert err.value.line == 5001


def test_csv_errors(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,10,2\nyesterday,10,2\n"
    )
    with pytest.raises(InputFileError, match=r"a\.csv:3: .*TIMESTAMP"):
        build_trace(p, "azure")
    p.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,10\n")
    with pytest.raises(InputFileError, match="missing column.*GeneratedTokens"):
        build_trace(p, "azure")
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,10\n")
    with pytest.raises(InputFileError, match=r":2: expected 3 fields, got 2"):
        build_trace(p, "azure")
    p.write_text("arrival_s,input_tokens,output_tokens\n0.5,10,2\n0.25,10,2\n")
    with pytest.raises(InputFileError, match=r":3: time goes backwards"):
        build_trace(p, "csv")
    p.write_text("arrival_s,input_tokens,output_tokens,prefix_group\n0.5,10,2,4\n")
    with pytest.raises(InputFileError, match=r":2: prefix_group 4"):
        build_trace(p, "csv")


@pytest.mark.parametrize(
    "content, fmt",
    [
        ("", "mooncake"),
        ("\n\n", "mooncake"),
        ("", "azure"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure"),
    ],
)
def test_empty_trace_is_an_error(tmp_path, content, fmt):
    p = tmp_path / "empty.txt"
    p.write_text(content)
    with pytest.raises(InputFileError, match="no requests"):
        build_trace(p, fmt)


def test_window_with_no_rows_is_an_error(tmp_path):
    p = write_jsonl(tmp_path, [GOOD, later()])
    with pytest.raises(InputFileError, match="no requests inside the window"):
        build_trace(p, start_s=100.0)


def test_missing_path_names_it():
    with pytest.raises(ConfigError) as err:
        build_trace("no/such/trace.jsonl")
    assert err.value.key == "workload.path" and "no/such/trace.jsonl" in str(err.value)
    with pytest.raises(ConfigError, match=r"workload\.input_tokens\.path: file not found: nope\.csv"):
        build_workload({"input_tokens": {"dist": "empirical", "path": "nope.csv"}}, seed=0)


@pytest.mark.parametrize(
    "cfg, key",
    [
        ({"arrival": {"rate_rps": -1}}, "workload.arrival.rate_rps"),
        ({"arrival": {"rate_rps": None}}, "workload.arrival.rate_rps"),
        ({"arrival": {"process": "weibull"}}, "workload.arrival.process"),
        ({"arrival": {"process": "gamma"}}, "workload.arrival.cv"),
        ({"arrival": {"process": "mmpp", "rates_rps": [1, 2], "dwell_s": [1]}}, "workload.arrival.dwell_s"),
        (
            {"arrival": {"process": "mmpp", "rates_rps": [1, 2], "dwell_s": [1, 0]}},
            "workload.arrival.dwell_s[1]",
        ),
        (
            {"arrival": {"process": "schedule", "rates_rps": [0, 0], "durations_s": [1, 1]}},
            "workload.arrival.rates_rps",
        ),
        ({"arrival": {"rate_rps": "fast"}}, "workload.arrival.rate_rps"),
        ({"num_requests": None, "duration_s": None}, "workload.num_requests"),
        ({"num_requests": -3}, "workload.num_requests"),
        ({"kind": "replay"}, "workload.kind"),
        ({"input_tokens": {"dist": "lognormal", "mu": 3}}, "workload.input_tokens.sigma"),
        ({"input_tokens": {"dist": "zipf"}}, "workload.input_tokens.dist"),
        ({"input_tokens": {"dist": "fixed", "value": 10, "min": 50, "max": 20}}, "workload.input_tokens.max"),
        ({"output_tokens": {"dist": "uniform", "low": 9, "high": 3}}, "workload.output_tokens.high"),
        ({"output_tokens": {"dist": "normal", "mean": -900, "std": 1}}, "workload.output_tokens"),
        ({"tenants": {"count": 0}}, "workload.tenants.count"),
        ({"tenants": {"count": 2, "shares": [1]}}, "workload.tenants.shares"),
        (
            {"tenants": {"count": 1, "profiles": [{"slo_class": "gold"}]}},
            "workload.tenants.profiles[0].slo_class",
        ),
        ({"slo": {"classes": [{"name": "a"}, {"name": "a"}]}}, "workload.slo.classes[1].name"),
        ({"slo": {"classes": [{"name": "a", "ttft_ms": 0}]}}, "workload.slo.classes[0].ttft_ms"),
        ({"prefix": {"groups": 0, "share": 0.5}}, "workload.prefix.groups"),
        ({"prefix": {"groups": 2, "tokens": 10, "share": 1.5}}, "workload.prefix.share"),
        ({"prefix": {"groups": 2, "group_tokens": [10]}}, "workload.prefix.group_tokens"),
        ({"sessions": {"enabled": True, "max_context_tokens": 0}}, "workload.sessions.max_context_tokens"),
        ({"kind": "trace", "format": None}, "workload.format"),
        ({"kind": "trace", "format": "jsonl"}, "workload.format"),
    ],
)
def test_config_errors_name_the_key(cfg, key):
    with pytest.raises(ConfigError) as err:
        build_workload(cfg, seed=0)
    assert err.value.key == key, str(err.value)


def test_trace_option_errors(tmp_path):
    p = write_jsonl(tmp_path, [GOOD, later()])
    for kw, key in [
        ({"time_scale": 0}, "workload.time_scale"),
        ({"time_scale": 2.0, "target_rate_rps": 5.0}, "workload.target_rate_rps"),
        ({"start_s": 5.0, "end_s": 5.0}, "workload.end_s"),
        ({"max_rows": 0}, "workload.max_rows"),
        ({"jitter_s": -1.0}, "workload.jitter_s"),
    ]:
        with pytest.raises(ConfigError) as err:
            build_trace(p, **kw)
        assert err.value.key == key
    single = write_jsonl(tmp_path, [GOOD])
    with pytest.raises(ConfigError, match="target_rate_rps"):
        build_trace(single, target_rate_rps=1.0)


def test_seed_and_block_size_are_checked():
    with pytest.raises(ConfigError):
        build_workload({}, seed=-1)
    with pytest.raises(ConfigError):
        build_workload({}, seed=0, block_size=0)


# --- keys the chosen distribution, process or kind does not read warn -------------------------------

UNREAD = [
    (["workload.input_tokens.value=-100"], "workload.input_tokens.value", "dist 'lognormal'"),  # the default's
    (["workload.input_tokens.value=nan"], "workload.input_tokens.value", "dist 'lognormal'"),
    (["workload=fixed", "workload.output_tokens.mu=3"], "workload.output_tokens.mu", "dist 'fixed'"),
    (["workload.output_tokens.dist=uniform", "workload.output_tokens.low=1", "workload.output_tokens.high=9",
      "workload.output_tokens.sigma=null"], "workload.output_tokens.mu", "dist 'uniform'"),
    (["workload.output_tokens.dist=exponential", "workload.output_tokens.mean=9", "workload.output_tokens.mu=null",
      "workload.output_tokens.sigma=null", "workload.output_tokens.std=2"], "workload.output_tokens.std", "dist 'exponential'"),
    (["workload.input_tokens.dist=normal", "workload.input_tokens.mean=500", "workload.input_tokens.std=50",
      "workload.input_tokens.mu=null", "workload.input_tokens.sigma=null", "workload.input_tokens.column=x"],
     "workload.input_tokens.column", "dist 'normal'"),
    (["workload=sessions", "workload.sessions.turns.mean=3"], "workload.sessions.turns.mean", "dist 'uniform'"),
    (["workload.sessions.max_context_tokens=4096"], "workload.sessions.max_context_tokens", "workload.sessions.enabled false"),
    (["+workload.slo.classes=[{name: a, input_tokens: {dist: fixed, value: 9, sigma: 2}}]"],
     "workload.slo.classes[0].input_tokens.sigma", "dist 'fixed'"),
    (["workload.arrival.cv=2"], "workload.arrival.cv", "process 'poisson'"),
    (["workload=mmpp_burst", "workload.arrival.rate_rps=5"], "workload.arrival.rate_rps", "process 'mmpp'"),
    (["workload.arrival.process=constant", "workload.arrival.repeat=false"], "workload.arrival.repeat", "process 'constant'"),
    (["workload.path=trace.csv"], "workload.path", "workload.kind 'synthetic'"),
    (["workload.time_scale=0.5"], "workload.time_scale", "workload.kind 'synthetic'"),
]


@pytest.mark.parametrize("overrides, key, why", UNREAD)
def test_a_key_the_chosen_distribution_process_or_kind_does_not_read_warns(overrides, key, why):
    import re

    from distsim import load_config
    from distsim.errors import ConfigWarning

    cfg = load_config(["workload.num_requests=10", *overrides])
    with pytest.warns(ConfigWarning, match=re.escape(f"{key}: is set, but {why} does not use it")):
        build_workload(cfg.workload, seed=0)


def test_a_trace_names_the_synthetic_sections_it_does_not_read(tmp_path):
    from distsim import load_config
    from distsim.errors import ConfigWarning

    p = write_jsonl(tmp_path, [GOOD, later()])
    cfg = load_config(["workload.kind=trace", "workload.format=mooncake", f"workload.path={p}"])  # over the default
    with pytest.warns(ConfigWarning) as record:
        build_workload(cfg.workload, seed=0)
    assert [str(w.message) for w in record] == [
        "workload.kind: is 'trace', which replays the file's arrival times and lengths: workload.arrival, "
        "workload.input_tokens, workload.output_tokens are set but not used"
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["workload=fixed", "workload.output_tokens.dist=lognormal", "workload.output_tokens.mu=3", "workload.output_tokens.sigma=0.8"],
        ["workload.arrival.process=gamma", "workload.arrival.cv=2"],  # the rate stays: gamma reads it
        ["workload.sessions.enabled=true", "workload.sessions.turns.dist=fixed", "workload.sessions.turns.value=3"],
        ["workload=mooncake_conversation"],
    ],
)
def test_shipped_workloads_and_documented_kind_switches_do_not_warn(overrides):
    import warnings

    from distsim import load_config
    from distsim.errors import ConfigWarning

    cfg = load_config(["workload.num_requests=10", *overrides])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        build_workload(cfg.workload, seed=0)
