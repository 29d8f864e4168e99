"""The one writer of distsim's output files: checked directories, atomic files, one-line errors.

Why: a run, sweep or report that dies half-way (a full disk, Ctrl-C, a killed process) must never leave
a file under its final name that looks complete, and a bad output path (read-only, or an existing file)
must read as one line naming it, not as a traceback after minutes of simulating. So every writer

- checks its directory before any work (:func:`prepare_dir`, or :func:`check_dir` without creating it),
- writes each file to a temporary name in the same directory, flushes it to disk and renames it onto its
  final name (``os.replace`` is atomic on POSIX): :func:`write_file` and the helpers below,
- turns an OSError on the way into an :class:`~distsim.errors.OutputError` naming the file,
- and, for files that belong together (a run's), keeps all or none of them (:func:`all_or_none`).

What a file path may be (:func:`landing`): nothing yet, a regular file (replaced), or a symbolic link, which
is written through: the file it ends at is replaced (or, for a dangling link, created) atomically in its
own directory and the link is kept, as the shell's ``>`` keeps it. Anything else at the path, or at the
end of its links (a device such as /dev/full, a FIFO, a socket, a directory, a link that loops, a link to
an open file descriptor such as /dev/stdout), is refused with one line naming it before any work: a rename never replaces a device node.
A new file gets the usual mode (0666 less the umask); a replaced one keeps its mode.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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


_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


def _refused(path: Path, mode: int, via: str = "") -> OutputError:
    """``path`` (or, ``via`` a link, what it ends at) is something a file must not replace."""
    if stat.S_ISDIR(mode):
        return OutputError(str(path), f"{via}is a directory; give a file name")
    kind = _KINDS.get(stat.S_IFMT(mode), "something other than a file")
    return OutputError(str(path), f"{via}is {kind}, not a regular file; distsim writes only regular files")


def _hops(path: Path, limit: int = 40) -> Iterator[Path]:
    """``path`` and each link it leads through, as named (a loop stops at ``limit``; os.stat reports it)."""
    hop = Path(os.path.abspath(path))
    for _ in range(limit):
        yield hop
        if not hop.is_symlink():
            return
        hop = Path(os.path.normpath(os.path.join(os.path.realpath(hop.parent), os.readlink(hop))))


def _in_proc(hop: Path) -> bool:
    """Is ``hop`` in /proc, where a link names an open file (/proc/self/fd/1), not a file's path?"""
    folder = os.path.realpath(hop.parent)
    return folder == "/proc" or folder.startswith("/proc/")


def landing(path: str | os.PathLike) -> Path:
    """The file that writing ``path`` replaces or creates: ``path`` itself, or the end of its symbolic
    links. Raises OutputError naming ``path`` if that is not a regular file (or nothing yet), or if a
    dangling link points into a directory that does not exist."""
    p = Path(path)
    try:
        here = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as err:
        raise OutputError(str(p), f"cannot be examined ({os_reason(err)})") from None
    if not stat.S_ISLNK(here.st_mode):
        if not stat.S_ISREG(here.st_mode):
            raise _refused(p, here.st_mode)
        return p
    if any(_in_proc(hop) for hop in _hops(p)):
        raise OutputError(str(p), "is a link to an open file descriptor (as /dev/stdout and /dev/fd/N are), not to a file; give a file path")
    end = Path(os.path.realpath(p))
    try:
        st = os.stat(p)  # the link's end, as the kernel follows it (/proc's fd links included)
    except FileNotFoundError:  # dangling: create what it names, as the shell's > does
        if not end.parent.is_dir():
            raise OutputError(str(p), f"is a symbolic link to {end}, whose directory does not exist") from None
        return end
    except OSError as err:  # a loop (ELOOP), a link through a non-directory
        raise OutputError(str(p), f"is a symbolic link that cannot be followed ({os_reason(err)})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refused(p, st.st_mode, via=f"links to {end}, which ")
    try:
        same = os.path.samestat(os.stat(end), st)
    except OSError:
        same = False
    if not same:  # e.g. /proc/self/fd/N of a deleted file: no name to replace it under
        raise OutputError(str(p), "is a symbolic link whose file has no name to be replaced under")
    return end


def prepare_file(path: str | os.PathLike) -> Path:
    """Ready ``path``'s directory (:func:`prepare_dir`) and check ``path`` can be written (:func:`landing`)."""
    p = Path(path).absolute()
    try:
        prepare_dir(p.parent)
    except OutputError as err:
        raise OutputError(str(p), f"its directory {err.path} {err.message}") from None
    landing(p)
    return p


@functools.cache
def _new_file_mode() -> int:
    """0666 less the process's umask, as open() would give (read once: reading it means setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_file(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """``write(tmp)`` writes the file at ``tmp``; it is then synced and renamed onto ``path``.

    On any failure (Ctrl-C included) the temporary file is removed and nothing appears under ``path`` (an
    earlier complete file there is left as it was); an OSError becomes an OutputError naming ``path``.
    A symbolic link is written through and kept; a path that is not a regular file is refused
    (:func:`landing`).
    """
    path = Path(path)
    target = landing(path)
    tmp = None
    try:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = _new_file_mode()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
        if _SETS and target == path:
            _SETS[-1].append(path)
    except OSError as err:
        if err.errno == errno.EISDIR or path.is_dir():
            raise OutputError(str(path), "is a directory") from None
        raise OutputError(str(path), f"could not be written ({os_reason(err)})") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


_SETS: list[list[Path]] = []  # the files written inside each open all_or_none(), innermost last


@contextmanager
def all_or_none() -> Iterator[None]:
    """The files written inside are kept only together: on any exception (a full disk, Ctrl-C) the ones
    already written are removed again, so a reader never finds part of a set (a run's tables without
    its summary). A file written through a symbolic link is left: its earlier content is gone anyway."""
    written: list[Path] = []
    _SETS.append(written)
    try:
        yield
    except BaseException:
        for path in written:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass  # the exception on its way says what went wrong; this file is complete
        raise
    finally:
        _SETS.pop()


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
    """Remove files a previous output left that this one will not rewrite (so no mix of two runs).

    A symbolic link is removed, never what it points to; a device, FIFO or socket is refused."""
    for path in paths:
        try:
            here = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise OutputError(str(path), f"cannot be examined ({os_reason(err)})") from None
        if not (stat.S_ISREG(here.st_mode) or stat.S_ISLNK(here.st_mode)):
            raise _refused(Path(path), here.st_mode)
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as err:
            raise OutputError(str(path), f"cannot remove the previous file ({os_reason(err)})") from None
