"""One small row per job: identity, status and every summary figure flattened with dots.

Rows are what travels through Ray's object store and what results.parquet holds; the per-request and
per-instance tables stay in the job's own directory. Swept values also appear as typed ``param.<key>``
columns so the report can plot a metric against a numeric parameter: numbers come from the parsed
override (distsim.runner.overrides), never from its text.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from distsim.runner.plan import Job

IDENTITY = ("job", "overrides", "config", "policy", "seed", "status", "error", "error_kind")
PARAM_PREFIX = "param."
OUTPUT_FAILED = "output"  # error_kind of a job whose outputs could not be written (a full disk, a read-only folder)
RUN_PREFIX = "run."  # wall time, node, pid, attempts: they vary between runs, so never compared


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'ttft_ms': {'p99': 1.0}} -> {'ttft_ms.p99': 1.0}; lists become JSON text."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def params(job: Job) -> dict[str, Any]:
    """A ``param.<key>`` column per override of the job's config, valued from its typed pair."""
    return {PARAM_PREFIX + o.key: o.column_value for o in job.config}


def base_row(job: Job, *, policy: str | None = None, seed: int | None = None) -> dict[str, Any]:
    return {
        "job": job.index,
        "overrides": job.overrides_str,
        "config": job.config_key,
        "policy": policy,
        "seed": seed if seed is not None else job.seed,
        "status": "ok",
        "error": None,
        "error_kind": None,
        **params(job),
    }


def failed_row(job: Job, error: str, kind: str, **fields: Any) -> dict[str, Any]:
    row = base_row(job, policy=fields.pop("policy", None), seed=fields.pop("seed", None))
    row.update(status="failed", error=error, error_kind=kind)
    row.update(fields)
    return row


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> the results table: identity, params, summary figures, run info; sorted by job."""
    rows = sorted(rows, key=lambda r: r["job"])
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    param_cols = sorted(c for c in seen if c.startswith(PARAM_PREFIX))
    run_cols = sorted(c for c in seen if c.startswith(RUN_PREFIX))
    figures = [c for c in seen if c not in IDENTITY and c not in param_cols and c not in run_cols]
    table = pd.DataFrame(rows, columns=[*IDENTITY, *param_cols, *figures, *run_cols])
    for col in ("job", "seed"):
        table[col] = table[col].astype("Int64")
    for col in param_cols:  # numbers in some jobs, text in others (a key set to 6000 and to null): all text
        kinds = {isinstance(v, str) for v in table[col] if not _missing(v)}
        if kinds == {True, False}:
            table[col] = [v if _missing(v) or isinstance(v, str) else str(v) for v in table[col]]
    return table


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def retried_jobs(results: pd.DataFrame) -> dict[int, int]:
    """Jobs that ran more than once because their worker died or hung, with their attempts."""
    column = RUN_PREFIX + "attempts"
    if column not in results:
        return {}
    tried = results[results[column].fillna(1) > 1]
    return {int(job): int(n) for job, n in zip(tried["job"], tried[column])}


def output_failures(results: pd.DataFrame) -> pd.DataFrame:
    """The jobs that failed because their outputs could not be written: a fault of the machine, which a
    rerun (resume) repeats only until the disk has room, so a score built on them would be wrong."""
    if "error_kind" not in results or not len(results):
        return results.iloc[0:0]
    return results[results["error_kind"] == OUTPUT_FAILED]


def stop_on_output_failures(results: pd.DataFrame, sweep_dir: object) -> None:
    """Raise a UserError (one line) when a job could not write its outputs, for a caller that builds on
    every job (the search): its finished jobs are on disk, and the same command resumes from them."""
    from distsim.errors import UserError

    failed = output_failures(results)
    if len(failed):
        row = failed.iloc[0]
        raise UserError(
            f"stopped: job {row['job']} of {sweep_dir} could not write its outputs ({row['error']}); "
            "the finished jobs are kept: make room and run the same command again to resume"
        )
