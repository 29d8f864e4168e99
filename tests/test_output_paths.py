"""What an output path may be (distsim.outputs.landing): a symbolic link is written through and kept,
anything that is not a regular file (a device, a FIFO, a socket, a directory, a looping link, an open
file descriptor such as /dev/stdout) is refused with one line naming it, and nothing is replaced."""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import pytest
from clikit import ROOT, assert_user_error, run_module

from distsim import outputs
from distsim.errors import OutputError

FIDELITY_RUN = str(ROOT / "tests" / "fixtures" / "fidelity" / "tiny.csv")


def no_temporary_files(folder: Path) -> bool:
    return not list(folder.rglob("*.tmp"))


def full_device(path: Path) -> Path:
    """A copy of /dev/full (character device 1:7), or skip where this user may not make device nodes."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_a_symlink_is_written_through_and_kept(tmp_path):
    target = tmp_path / "data" / "profile.json"
    target.parent.mkdir()
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    outputs.write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640  # its mode kept
    assert no_temporary_files(tmp_path)


def test_a_chain_of_relative_symlinks_is_followed_to_its_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "file.txt").write_text("old")
    (tmp_path / "sub" / "one").symlink_to("file.txt")
    (tmp_path / "two").symlink_to("sub/one")
    outputs.write_text(tmp_path / "two", "new")
    assert (tmp_path / "sub" / "file.txt").read_text() == "new"
    assert (tmp_path / "two").is_symlink() and (tmp_path / "sub" / "one").is_symlink()


def test_a_dangling_symlink_creates_what_it_names_as_the_shell_does(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    outputs.write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "x"
    assert stat.S_IMODE((tmp_path / "made.json").stat().st_mode) == 0o666 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_dangling_symlink_into_a_missing_folder_is_refused(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "missing" / "made.json")
    with pytest.raises(OutputError, match="whose directory does not exist") as err:
        outputs.write_text(link, "x")
    assert str(link) in str(err.value) and not (tmp_path / "missing").exists()


def test_a_looping_symlink_is_refused(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OutputError, match="cannot be followed"):
        outputs.write_text(tmp_path / "a", "x")
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


def test_a_device_node_is_refused_and_kept(tmp_path):
    node = full_device(tmp_path / "full")
    link = tmp_path / "link"
    link.symlink_to(node)
    for path in (node, link):
        with pytest.raises(OutputError, match="is a character device, not a regular file") as err:
            outputs.write_text(path, "x")
        assert str(err.value).startswith(f"output error: {path}: ")
    with pytest.raises(OutputError, match="character device"):
        outputs.prepare_file(node)  # before any work
    assert stat.S_ISCHR(node.lstat().st_mode) and link.is_symlink() and no_temporary_files(tmp_path)


def test_a_fifo_is_refused_without_blocking_on_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="is a FIFO"):
        outputs.write_text(fifo, "x")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(OutputError, match="is a socket"):
            outputs.write_text(path, "x")
        assert stat.S_ISSOCK(path.lstat().st_mode)


def test_a_directory_where_a_file_is_expected_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "link").symlink_to("out")
    for path in (tmp_path / "out", tmp_path / "link"):
        with pytest.raises(OutputError, match="is a directory; give a file name"):
            outputs.prepare_file(path)
        with pytest.raises(OutputError, match="is a directory"):
            outputs.write_text(path, "x")
    assert (tmp_path / "out").is_dir() and not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("path", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_an_open_file_descriptor_is_refused_whatever_it_is(path, tmp_path):
    """Through a link of our own: a writer that replaced the path (as root, the old one did) would replace
    that link, not the system's /dev/stdout."""
    if not os.path.lexists(path):
        pytest.skip(f"{path} does not exist here")
    link = tmp_path / "out.json"
    link.symlink_to(path)
    with pytest.raises(OutputError, match="open file descriptor"):
        outputs.write_text(link, "x")
    assert link.is_symlink()


def test_remove_takes_a_link_away_never_what_it_points_to(tmp_path):
    target = tmp_path / "kept.json"
    target.write_text("kept")
    (tmp_path / "old.json").symlink_to(target)
    os.mkfifo(tmp_path / "fifo.json")
    outputs.remove([tmp_path / "old.json", tmp_path / "absent.json"])
    assert not os.path.lexists(tmp_path / "old.json") and target.read_text() == "kept"
    with pytest.raises(OutputError, match="is a FIFO"):
        outputs.remove([tmp_path / "fifo.json"])
    assert stat.S_ISFIFO((tmp_path / "fifo.json").lstat().st_mode)


# --- the command line --------------------------------------------------------------------------------


def test_calibrate_writes_its_profile_through_a_symlink(tmp_path):
    target = tmp_path / "profiles" / "gpu.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "gpu.json"
    link.symlink_to(target)
    proc = run_module("distsim.calibrate", FIDELITY_RUN, "--budget", "2", "--out", str(link))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert link.is_symlink() and target.read_text().lstrip().startswith("{")


def test_calibrate_refuses_a_device_before_fitting(tmp_path):
    node = full_device(tmp_path / "full")
    proc = run_module("distsim.calibrate", FIDELITY_RUN, "--budget", "2", "--out", str(node))
    assert_user_error(proc, 2, str(node), "character device")
    assert stat.S_ISCHR(node.lstat().st_mode)


@pytest.mark.skipif(sys.platform != "linux", reason="/proc links are Linux's")
def test_a_run_refuses_an_output_that_is_standard_output(tmp_path):
    """Runs write into a directory; a file in it that links to /dev/stdout is refused, not replaced."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "perf.json").symlink_to("/dev/stdout")
    proc = run_module("distsim", "workload.num_requests=20", "cluster.instances=1", f"hydra.run.dir={run_dir}")
    assert_user_error(proc, 2, str(run_dir / "perf.json"), "open file descriptor")
    assert (run_dir / "perf.json").is_symlink() and not (run_dir / "summary.json").exists()
