"""ServeGen's released workload data (alibaba/ServeGen, ``data/<category>/<model>/chunk-N-*``) as a trace.

ServeGen does not publish requests: each chunk is one client of Alibaba Cloud Model Studio, described
window by window. ``chunk-N-trace.csv`` (no header) has one row per 600-second window: its start in
seconds, the client's rate (requests/s), the inter-arrival times' CV, and their distribution (``Gamma``
or ``Weibull``, with shape and scale; an empty name: no requests in that window).
``chunk-N-dataset.json`` maps window starts (every 6 hours) to the probability mass of ``input_tokens``
and ``output_tokens`` (``{tokens: probability}``, written as Python dict literals); a trace window takes
the latest dataset window at or before it (``reason_ratio``, the reasoning models' extra field, is not
read).

The rows are drawn as ServeGen's own generator draws them (servegen/construct.py): ceil(rate x window)
inter-arrival times from the window's distribution, scaled to sum to the window, their running sums
after its start, those inside it kept. Lengths are drawn independently from the two distributions
(ServeGen's generator draws both from one uniform, which makes them comonotone; the data gives only the
marginals); a 0-token draw counts as 1. The draws come from the trace's own stream
("workload/servegen", from ``seed``), window by window, so a seed gives one fixed trace. The last
window lasts as long as the one before it.

Point ``workload.path`` at a ``chunk-N-trace.csv``; its dataset file is the same name with
``-dataset.json`` for ``-trace.csv``.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from distsim import inputs
from distsim.errors import InputFileError
from distsim.events.rng import stream
from distsim.inputs import excerpt
from distsim.workload.traces.formats import READERS
from distsim.workload.traces.rows import TraceReader, TraceRow

PATTERNS = ("Gamma", "Weibull")
_S = 1_000_000_000


def dataset_path(trace: Path) -> Path:
    name = trace.name
    if not name.endswith("-trace.csv"):
        raise InputFileError(trace, "a ServeGen trace is named chunk-N-trace.csv (its dataset: chunk-N-dataset.json)")
    return trace.with_name(name[: -len("-trace.csv")] + "-dataset.json")


def _pmf(text: object, where: str, path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(token counts, cumulative probabilities) of a ``{tokens: probability}`` literal; None if empty."""
    try:
        pmf = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError):
        pmf = None
    if not isinstance(pmf, dict) or not all(isinstance(k, int) and isinstance(v, (int, float)) for k, v in pmf.items()):
        raise InputFileError(path, f"{where}: not a {{tokens: probability}} mapping ({excerpt(text)})")
    if not pmf:
        return None
    tokens = np.array(sorted(pmf), dtype=np.int64)
    probs = np.array([pmf[k] for k in tokens], dtype=np.float64)
    total = probs.sum()
    if (probs < 0).any() or not math.isclose(total, 1.0, abs_tol=1e-6):
        raise InputFileError(path, f"{where}: probabilities must be >= 0 and sum to 1 (sum {total:.6g})")
    return np.maximum(tokens, 1), np.cumsum(probs) / total


def read_dataset(path: Path) -> list[tuple[int, tuple, tuple]]:
    """The dataset windows with both distributions, by start time."""
    data = inputs.read_json(path)
    windows = []
    for key, fields in data.items():
        try:
            start = int(key)
        except ValueError:
            raise InputFileError(path, f"window {excerpt(key)}: not a start time in seconds") from None
        if not isinstance(fields, dict) or "input_tokens" not in fields or "output_tokens" not in fields:
            raise InputFileError(path, f"window {key}: needs input_tokens and output_tokens")
        pmfs = [_pmf(fields[f], f"window {key} {f}", path) for f in ("input_tokens", "output_tokens")]
        if pmfs[0] is not None and pmfs[1] is not None:  # ServeGen skips a window with an empty distribution
            windows.append((start, pmfs[0], pmfs[1]))
    return sorted(windows, key=lambda w: w[0])


def _window_rows(path: Path) -> Iterator[tuple[int, int, float, str, float, float]]:
    """(line, start s, rate, pattern, shape, scale) per trace line."""
    with inputs.csv_reader(path) as reader:
        for rec in reader:
            ln = reader.line_num
            if not rec or (len(rec) == 1 and not rec[0].strip()):
                continue
            if len(rec) != 6:
                raise InputFileError(path, f"expected 6 fields (start, rate, cv, pattern, shape, scale), got {len(rec)}", ln)
            try:
                start, rate = int(rec[0]), float(rec[1])
                shape, scale = (float(rec[4]), float(rec[5])) if rec[3] else (0.0, 0.0)
            except ValueError:
                raise InputFileError(path, f"not numbers: {excerpt(','.join(rec))}", ln) from None
            if rec[3] and rec[3] not in PATTERNS:
                raise InputFileError(path, f"unknown arrival pattern {rec[3]!r} (known: {', '.join(PATTERNS)})", ln)
            if rate < 0 or (rec[3] and not (shape > 0 and scale > 0)):
                raise InputFileError(path, "rate must be >= 0 and shape, scale > 0", ln)
            yield ln, start, rate, rec[3], shape, scale


def _draw(cdf: tuple[np.ndarray, np.ndarray], rng: np.random.Generator, n: int) -> np.ndarray:
    tokens, cum = cdf
    return tokens[np.minimum(np.searchsorted(cum, rng.random(n)), len(tokens) - 1)]


@READERS.register("servegen")
class ServeGenReader(TraceReader):
    def rows(self) -> Iterator[TraceRow]:
        path = Path(self.path)
        windows = list(_window_rows(path))
        data = read_dataset(dataset_path(path))
        starts = [w[0] for w in data]
        rng = stream(self.seed, "workload/servegen")
        for i, (ln, start, rate, pattern, shape, scale) in enumerate(windows):
            if i + 1 < len(windows):
                size = windows[i + 1][1] - start
            else:
                size = start - windows[i - 1][1] if i else 600
            if size <= 0:
                raise InputFileError(path, "window starts must increase", ln)
            if not pattern or rate == 0:
                continue
            k = int(np.searchsorted(starts, start, side="right")) - 1
            if k < 0:
                raise InputFileError(path, f"no dataset window at or before {start} s in {dataset_path(path).name}", ln)
            n = math.ceil(rate * size)
            iats = rng.gamma(shape, scale, n) if pattern == "Gamma" else scale * rng.weibull(shape, n)
            iats *= size / iats.sum()
            times_ns = np.rint((start + np.cumsum(iats)) * _S).astype(np.int64)
            times_ns = times_ns[times_ns < (start + size) * _S]  # inside the window
            inputs_, outputs_ = _draw(data[k][1], rng, len(times_ns)), _draw(data[k][2], rng, len(times_ns))
            for t, p, o in zip(times_ns.tolist(), inputs_.tolist(), outputs_.tolist(), strict=True):
                yield TraceRow(ln, t, p, o)
