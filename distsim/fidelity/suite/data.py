"""Reading a folder of measured runs that share one layout: ``experiments.csv``,
``workload_profiles.json``, ``traces/<workload>.csv`` and ``measured.csv``, as in
``../shared/data/h100_vllm_runs`` (its README defines the files and the metrics).

Every file goes through :mod:`distsim.inputs`, so a broken one is one :class:`InputFileError` naming
it (and the line where there is one). Nothing is simulated here; :mod:`distsim.fidelity.suite.replay` replays.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from distsim import inputs, outputs
from distsim.errors import InputFileError, UserError
from distsim.fidelity.run import EngineSettings

EXPERIMENT_COLUMNS = (
    "id", "folder", "model", "model_config", "precision", "tp", "max_num_seqs",
    "max_num_batched_tokens", "total_kv_blocks", "cpu_kv_blocks", "workload", "num_requests",
)
MEASURED_COLUMNS = ("folder", "stage_index", "metric_name", "simulator", "predicted", "actual", "mpe")


@dataclass(frozen=True)
class Stage:
    duration_s: float
    rate_rps: float


@dataclass(frozen=True)
class WorkloadProfile:
    """A workload's inference-perf ``shared_prefix`` spec and its rate stages."""

    name: str
    system_prompt_len: int
    num_system_prompts: int
    users_per_prompt: int
    question_len: int
    output_len: int
    stages: tuple[Stage, ...]


@dataclass(frozen=True)
class SuiteRun:
    """One row of experiments.csv with what it points to."""

    id: str
    folder: str
    model_name: str  # the served model (Hugging Face id)
    model: str  # what cluster.model gets: a catalog name or the absolute path of a config folder
    precision: str
    engine: EngineSettings
    cpu_kv_blocks: int
    workload: WorkloadProfile
    num_requests: int
    trace: Path

    @property
    def tp(self) -> int:
        return int(self.engine.tensor_parallel_size or 1)

    def flags(self) -> list[str]:
        """What of the run the replay leaves out: nothing of the engine settings (the CPU KV tier of
        runs with cpu_kv_blocks > 0 is simulated, cluster.engine.cpu_kv_blocks)."""
        return []


@dataclass
class Suite:
    root: Path
    runs: list[SuiteRun]
    measured: pd.DataFrame  # MEASURED_COLUMNS, one row per (folder, stage, metric, simulator)

    def measured_for(self, run: SuiteRun) -> pd.DataFrame:
        return self.measured[self.measured["folder"] == run.folder]

    def select(self, ids: Sequence[str] | None, option: str = "--runs") -> list[SuiteRun]:
        """The runs named by ``ids`` (all for None), in the folder's order; an id the folder lacks is a
        UserError naming it and listing the folder's ids, so a typo is never an empty table."""
        if ids is None:
            return list(self.runs)
        known = [r.id for r in self.runs]
        unknown = [i for i in dict.fromkeys(ids) if i not in known]
        if unknown:
            raise UserError(f"{option}: no run {', '.join(unknown)} in {self.root} (runs: {', '.join(known)})")
        return [r for r in self.runs if r.id in ids]


def parse_ids(text: str | None, option: str = "--runs") -> list[str] | None:
    """A comma-separated list of run ids (None when the option is absent); an empty list is a UserError."""
    if text is None:
        return None
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not ids:
        raise UserError(f"{option}: no run id given (got {text!r})")
    return ids


def _integer(value: Any, name: str, path: Path, where: str, line: int | None = None) -> int:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number != int(number) or number < 0:
        got = inputs.excerpt(value)
        raise InputFileError(path, f"{where}'{name}' must be a whole number >= 0 (got {got})", line)
    return int(number)


def _number(value: Any, name: str, path: Path, where: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0:
        got = inputs.excerpt(value)
        raise InputFileError(path, f"{where}'{name}' must be a positive number (got {got})")
    return float(value)


def _profile(name: str, spec: Any, path: Path) -> WorkloadProfile:
    where = f"{name}."
    if not isinstance(spec, dict) or not isinstance(spec.get("shared_prefix"), dict):
        raise InputFileError(path, f"'{name}' must be an object with 'shared_prefix' and 'stages'")
    sp = spec["shared_prefix"]
    stages = spec.get("stages")
    if not isinstance(stages, list) or not stages or not all(isinstance(s, dict) for s in stages):
        raise InputFileError(path, f"'{where}stages' must be a non-empty list of objects")
    get = {k: _integer(sp.get(k), k, path, f"{where}shared_prefix.") for k in (
        "system_prompt_len", "num_unique_system_prompts", "num_users_per_system_prompt", "question_len",
        "output_len")}
    parsed = tuple(
        Stage(
            _number(s.get("duration"), "duration", path, f"{where}stages[{i}]."),
            _number(s.get("rate"), "rate", path, f"{where}stages[{i}]."),
        )
        for i, s in enumerate(stages)
    )
    return WorkloadProfile(
        name, get["system_prompt_len"], get["num_unique_system_prompts"], get["num_users_per_system_prompt"],
        get["question_len"], get["output_len"], parsed,
    )


def read_profiles(path: Path) -> dict[str, WorkloadProfile]:
    """workload_profiles.json: ``{workload: {shared_prefix: {...}, stages: [{duration, rate}]}}``."""
    data = inputs.read_json(path)
    return {name: _profile(name, spec, path) for name, spec in data.items()}


def _model(value: str, root: Path, path: Path, line: int) -> str:
    """A catalog name stays as it is; a path (``models/x``) becomes absolute and must exist."""
    if "/" not in value:
        return value
    target = root / value
    if not target.exists():
        raise InputFileError(path, f"model_config {value!r}: no such file or folder under {root}", line)
    return str(target)


def _run(
    rec: dict[str, str], root: Path, profiles: dict[str, WorkloadProfile], path: Path, line: int
) -> SuiteRun:
    num = {k: _integer(rec[k], k, path, "", line) for k in (
        "tp", "max_num_seqs", "max_num_batched_tokens", "total_kv_blocks", "cpu_kv_blocks", "num_requests")}
    workload = rec["workload"].strip()
    if workload not in profiles:
        raise InputFileError(path, f"workload {workload!r} is not in workload_profiles.json", line)
    trace = root / "traces" / f"{workload}.csv"
    if not trace.is_file():
        raise InputFileError(path, f"no trace for workload {workload!r} (expected {trace})", line)
    engine = EngineSettings(
        max_num_seqs=num["max_num_seqs"], max_num_batched_tokens=num["max_num_batched_tokens"],
        total_kv_blocks=num["total_kv_blocks"], tensor_parallel_size=num["tp"],
        cpu_kv_blocks=num["cpu_kv_blocks"],
    )
    return SuiteRun(
        rec["id"].strip(), rec["folder"].strip(), rec["model"].strip(),
        _model(rec["model_config"].strip(), root, path, line), rec["precision"].strip(), engine,
        num["cpu_kv_blocks"], profiles[workload], num["num_requests"], trace,
    )


def read_experiments(path: Path, root: Path, profiles: dict[str, WorkloadProfile]) -> list[SuiteRun]:
    """experiments.csv: one run a row (:data:`EXPERIMENT_COLUMNS`), in file order."""
    runs: list[SuiteRun] = []
    with inputs.csv_reader(path, dicts=True) as reader:
        missing = [c for c in EXPERIMENT_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputFileError(path, f"missing column(s) {', '.join(missing)}", 1)
        for rec in reader:
            if any(rec.get(c) is None for c in EXPERIMENT_COLUMNS):
                raise InputFileError(path, "too few fields", reader.line_num)
            runs.append(_run(rec, root, profiles, path, reader.line_num))
    if not runs:
        raise InputFileError(path, "no runs (only a header line)")
    return runs


def read_measured(path: Path) -> pd.DataFrame:
    """measured.csv, one row per (folder, stage, metric, simulator). The file repeats some records
    under several workload names (run 20260217-155451); repeats are dropped, the first kept."""
    frame = inputs.read_csv_frame(path)
    missing = [c for c in MEASURED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputFileError(path, f"missing column(s) {', '.join(missing)}")
    frame = frame[list(MEASURED_COLUMNS)].copy()
    frame["folder"] = frame["folder"].astype(str)
    for col in ("stage_index", "predicted", "actual", "mpe"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    if frame["stage_index"].isna().any() or frame["actual"].isna().any():
        raise InputFileError(path, "'stage_index' and 'actual' must be numbers on every row")
    frame["stage_index"] = frame["stage_index"].astype(int)
    keys = ["folder", "stage_index", "metric_name", "simulator"]
    return frame.drop_duplicates(keys, keep="first").reset_index(drop=True)


def read_suite(folder: str | Path) -> Suite:
    """The whole folder: runs (with their profiles and traces) and the measurements."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputFileError(root, "not a folder (expected experiments.csv, workload_profiles.json, ...)")
    profiles = read_profiles(root / "workload_profiles.json")
    runs = read_experiments(root / "experiments.csv", root, profiles)
    return Suite(root, runs, read_measured(root / "measured.csv"))


def pool_trace(trace: Path) -> Path:
    """``trace`` as inference-perf's ``shared_prefix`` generator sent it: a pool of one fixed prompt per user
    (system prompt and question), each user's prompt sent again at every round (the generator cycles its
    prompts; inference_perf/datagen/shared_prefix_datagen.py). Written once, beside the system's temporary
    files, with a ``session`` column numbering the trace's ``user`` column in order of first appearance:
    distsim's replay gives a session's later rounds the earlier round's block keys (the prompt is the
    same), so a round after the first finds its whole prompt in the prefix cache, as vLLM did."""
    try:
        digest = hashlib.sha256(Path(trace).read_bytes()).hexdigest()[:16]
    except OSError as err:
        raise InputFileError(trace, f"cannot read: {err.strerror or err}") from None
    out = Path(tempfile.gettempdir()) / "distsim-fidelity" / f"{Path(trace).stem}.pool.{digest}.csv"
    if out.exists():
        return out
    frame = inputs.read_csv_frame(trace)
    if "user" not in frame.columns:
        raise InputFileError(trace, "replay.prompts=pool needs a user column (the prompt each row repeats)")
    first = {u: i for i, u in enumerate(dict.fromkeys(frame["user"].tolist()))}
    frame = frame.drop(columns=[c for c in ("session",) if c in frame.columns])
    frame["session"] = frame["user"].map(first).astype("int64")
    out.parent.mkdir(parents=True, exist_ok=True)
    outputs.write_csv(out, frame)
    return out
