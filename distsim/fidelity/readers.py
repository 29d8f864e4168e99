"""One entry point for every run format: the format is recognised from the files present."""

from __future__ import annotations

from pathlib import Path

from distsim.errors import InputFileError
from distsim.fidelity.aiperf_format import read_aiperf_export, records_path
from distsim.fidelity.bench_format import is_bench_run, read_bench_run
from distsim.fidelity.csv_format import csv_path, read_csv_run
from distsim.fidelity.guidellm_format import is_guidellm_report, read_guidellm_report
from distsim.fidelity.run import MeasuredRun
from distsim.fidelity.vllm_bench_format import is_vllm_bench_result, read_vllm_bench_result


def read_run(path: str | Path) -> MeasuredRun:
    """A measured run: a vLLM bench folder (requests.jsonl + meta.json), a ``vllm bench serve
    --save-result --save-detailed`` JSON, a GuideLLM report, an AIPerf run (profile_export.jsonl), or a
    plain CSV run."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputFileError(p, "no such file or folder")
    if is_bench_run(p):
        return read_bench_run(p)
    if records_path(p) is not None:
        return read_aiperf_export(p)
    if is_vllm_bench_result(p):
        return read_vllm_bench_result(p)
    if is_guidellm_report(p):
        return read_guidellm_report(p)
    if csv_path(p) is not None:
        return read_csv_run(p)
    raise InputFileError(
        p,
        "not a run: expected a folder with requests.jsonl (vLLM bench format), a vllm bench serve --save-result "
        "--save-detailed JSON, a GuideLLM report, an AIPerf run (profile_export.jsonl), or a CSV run (see distsim.fidelity.csv_format)",
    )
