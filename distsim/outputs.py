"""The one writer of distsim's output files: checked directories, atomic files, one-line errors.

Why: a run, sweep or report that dies half-way (a full disk, Ctrl-C, a killed process) must never leave
a file under its final name that looks complete, and a bad output path (read-only, or an existing file)
must read as one line naming it, not as a traceback after minutes of simulating. So every writer

- checks its directory before any work (:func:`prepare_dir`, or :func:`check_dir` without creating it),
- writes each file to a temporary name in the same directory, flushes it to disk and renames it onto its
  final name (``os.replace`` is atomic on POSIX): :func:`write_file` and the helpers below,
- turns an OSError on the way into an :class:`~distsim.errors.OutputError` naming the file.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from distsim.errors import OutputError, os_reason

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def _first_file(path: Path) -> Path | None:
    """The first of ``path`` and its ancestors that exists and is not a directory, if any."""
    for part in (*reversed(path.parents), path):
        if part.exists() and not part.is_dir():
            return part
        if not part.exists():
            return None
    return None


def check_dir(path: str | os.PathLike) -> Path:
    """Can ``path`` be (or become) a writable directory? Creates nothing; raises OutputError if not."""
    p = Path(path).absolute()
    blocker = _first_file(p)
    if blocker == p:
        raise OutputError(str(p), "exists and is a file, not a directory")
    if blocker is not None:
        raise OutputError(str(p), f"cannot be created: {blocker} is a file, not a directory")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == p else f"cannot be created: {existing} is not writable"
        raise OutputError(str(p), what)
    return p


def prepare_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (with its parents) as a writable directory, or raise OutputError naming it."""
    p = check_dir(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(str(p), f"cannot be created ({os_reason(err)})") from None
    return p


def prepare_file(path: str | os.PathLike) -> Path:
    """Ready ``path``'s directory (:func:`prepare_dir`) and check ``path`` is not a directory."""
    p = Path(path).absolute()
    try:
        prepare_dir(p.parent)
    except OutputError as err:
        raise OutputError(str(p), f"its directory {err.path} {err.message}") from None
    if p.is_dir():
        raise OutputError(str(p), "is a directory; give a file name")
    return p


def write_file(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """``write(tmp)`` writes the file at ``tmp``; it is then synced and renamed onto ``path``.

    On any failure the temporary file is removed and nothing appears under ``path`` (an earlier
    complete file there is left as it was); an OSError becomes an OutputError naming ``path``.
    """
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        if err.errno == errno.EISDIR or path.is_dir():
            raise OutputError(str(path), "is a directory") from None
        raise OutputError(str(path), f"could not be written ({os_reason(err)})") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return write_file(path, write)


@runtime_checkable
class WritesParquet(Protocol):
    """A table that writes itself as Parquet: distsim.metrics.columns.Table (pandas' bytes, without pandas)."""

    def write_parquet(self, path: str, /) -> None: ...


def write_parquet(path: str | os.PathLike, frame: pd.DataFrame | WritesParquet) -> Path:
    """A DataFrame, or a table that writes itself (a column table: the same bytes, without importing pandas)."""
    if isinstance(frame, WritesParquet):
        return write_file(path, frame.write_parquet)
    return write_file(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))


def write_csv(path: str | os.PathLike, frame: pd.DataFrame) -> Path:
    return write_file(path, lambda tmp: frame.to_csv(tmp, index=False))


def save_figure(fig: Figure, path: str | os.PathLike, **savefig: object) -> Path:
    """A matplotlib figure; the format follows the final name's suffix, not the temporary one's."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    return write_file(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig))


def remove(paths: Iterable[str | os.PathLike]) -> None:
    """Remove files a previous output left that this one will not rewrite (so no mix of two runs)."""
    for path in paths:
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as err:
            raise OutputError(str(path), f"cannot remove the previous file ({os_reason(err)})") from None
