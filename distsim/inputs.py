"""Opening, decoding and parsing every input file a user names (traces, length tables, model configs,
latency profiles, measured runs), in one place.

Each reader goes through these helpers so that every way a file can be unreadable - missing, a folder,
no permission, binary, UTF-16, broken JSON/YAML/CSV/Parquet, absurdly nested or absurdly large - ends
as one :class:`InputFileError` naming the file (and the line where there is one), never a traceback.
Text is UTF-8 (a leading byte-order mark is allowed). A NUL byte in the first 8 KiB marks a file as
binary, as git and grep do: UTF-16 without a byte-order mark is valid UTF-8 otherwise.
"""

from __future__ import annotations

import csv
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from distsim.errors import InputFileError

NOT_TEXT = "not UTF-8 text (binary or UTF-16?)"
SNIFF_BYTES = 8192
CONFIG_MAX_BYTES = 64 * 1024 * 1024  # a JSON/YAML settings file larger than this is not one


def regular_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path after checking it names an existing regular file."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputFileError(p, "no such file") from None
    except OSError as err:
        raise InputFileError(p, f"cannot read: {err.strerror or err}") from None
    if stat.S_ISDIR(mode):
        raise InputFileError(p, "is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputFileError(p, "not a regular file")
    return p


def _open_binary(p: Path):
    try:
        return open(p, "rb")
    except OSError as err:
        raise InputFileError(p, f"cannot read: {err.strerror or err}") from None


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _first_bad_line(p: Path) -> int | None:
    """The 1-based line holding the first byte sequence that is not UTF-8 (None if there is none)."""
    with _open_binary(p) as f:
        for n, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return n
    return None


def not_text(path: str | os.PathLike) -> InputFileError:
    """The error for a file that is not UTF-8 text, with the line of its first bad byte."""
    p = Path(path)
    return InputFileError(p, NOT_TEXT, _first_bad_line(p))


def check_text(path: str | os.PathLike, *, max_bytes: int | None = None) -> Path:
    """A regular file whose first bytes hold no NUL (and no larger than ``max_bytes``), as a Path."""
    p = regular_file(path)
    if max_bytes is not None:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputFileError(p, f"too large for this kind of file ({size} bytes; at most {max_bytes})")
    with _open_binary(p) as f:
        head = f.read(SNIFF_BYTES)
    nul = head.find(b"\x00")
    if nul >= 0:
        raise InputFileError(p, NOT_TEXT, _line_of(head, nul))
    return p


@contextmanager
def open_text(
    path: str | os.PathLike, *, newline: str | None = None, max_bytes: int | None = None
) -> Iterator[TextIO]:
    """The file opened as UTF-8 text; a decoding error while the block reads it becomes InputFileError."""
    p = check_text(path, max_bytes=max_bytes)
    try:
        f = open(p, encoding="utf-8-sig", newline=newline)
    except OSError as err:
        raise InputFileError(p, f"cannot read: {err.strerror or err}") from None
    with f:
        try:
            yield f
        except UnicodeDecodeError:
            raise not_text(p) from None


def read_text(path: str | os.PathLike, *, max_bytes: int | None = CONFIG_MAX_BYTES) -> str:
    """The whole file as text (settings files: at most ``max_bytes``)."""
    with open_text(path, max_bytes=max_bytes) as f:
        return f.read()


def parse_json(text: str, path: str | os.PathLike, line: int | None = None) -> Any:
    """``text`` parsed as JSON; ``line`` is the file line ``text`` is (None: ``text`` is the whole file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = err.lineno if line is None else line
        raise InputFileError(path, f"not valid JSON: {err.msg} (column {err.colno})", where) from None
    except RecursionError:
        raise InputFileError(path, "not valid JSON: nested too deeply", line) from None
    except ValueError as err:  # e.g. an integer with more digits than Python converts
        raise InputFileError(path, f"not valid JSON: {err}", line) from None


def read_json(path: str | os.PathLike, *, what: str | None = "a JSON object") -> Any:
    """A JSON settings file; with ``what``, its top level must be an object (named so in the error)."""
    data = parse_json(read_text(path), path)
    if what is not None and not isinstance(data, dict):
        raise InputFileError(path, f"expected {what}")
    return data


def json_lines(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a JSON-lines file; each must be an object."""
    with open_text(path) as f:
        for ln, text in enumerate(f, 1):
            if not text.strip():
                continue
            obj = parse_json(text, path, ln)
            if not isinstance(obj, dict):
                raise InputFileError(path, "expected a JSON object", ln)
            yield ln, obj


def read_yaml(path: str | os.PathLike) -> Any:
    """A YAML settings file, parsed safely (plain data only)."""
    import yaml

    text = read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None)
        msg = f"not valid YAML: {problem}" if problem else "not valid YAML"
        raise InputFileError(path, msg, None if mark is None else mark.line + 1) from None
    except RecursionError:
        raise InputFileError(path, "not valid YAML: nested too deeply") from None


@contextmanager
def csv_reader(path: str | os.PathLike, *, dicts: bool = False) -> Iterator[Any]:
    """A ``csv.reader`` (``csv.DictReader`` with ``dicts``) over the file; CSV and decoding errors
    inside the block become InputFileError with the line the reader had reached."""
    with open_text(path, newline="") as f:
        reader = csv.DictReader(f) if dicts else csv.reader(f)
        try:
            yield reader
        except csv.Error as err:
            raise InputFileError(path, f"not valid CSV: {err}", max(reader.line_num, 1)) from None


def read_csv_frame(path: str | os.PathLike, **kwargs: Any):
    """``pandas.read_csv`` of the file, its errors turned into InputFileError."""
    import pandas as pd

    p = check_text(path)
    try:
        return pd.read_csv(p, encoding="utf-8", **kwargs)
    except UnicodeDecodeError:
        raise not_text(p) from None
    except pd.errors.EmptyDataError:
        raise InputFileError(p, "empty file (no header line)") from None
    except pd.errors.ParserError as err:
        raise InputFileError(p, f"not valid CSV: {str(err).strip().splitlines()[-1]}") from None
    except OSError as err:
        raise InputFileError(p, f"cannot read: {err.strerror or err}") from None
    except ValueError as err:
        raise InputFileError(p, f"cannot read as CSV: {str(err).splitlines()[0]}") from None


@contextmanager
def arrow_errors(path: str | os.PathLike) -> Iterator[None]:
    """Inside the block, pyarrow's errors on a broken Parquet file become InputFileError."""
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputFileError(path, f"not a readable Parquet file: {detail}") from None


def parquet_file(path: str | os.PathLike):
    """A ``pyarrow.parquet.ParquetFile`` (read its batches inside :func:`arrow_errors` too)."""
    import pyarrow.parquet as pq

    p = regular_file(path)
    with arrow_errors(p):
        return pq.ParquetFile(p)


def excerpt(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters, for echoing file content in a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
