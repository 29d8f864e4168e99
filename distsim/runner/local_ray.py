"""The private local Ray a sweep starts when ``runner.address`` is null: loopback only, quiet, and gone when
the driver is.

What Ray 2.60 does on its own, measured on this machine (docs/guide/sweeps.md, "The local Ray"): it takes the
machine's interface address as the node IP, so the runtime-env agent and the dashboard agent's HTTP server
bind that address and every gRPC server (GCS, raylet, workers, the driver) binds all interfaces; it switches
token authentication on with a warning on stderr and writes a token to ~/.ray/auth_token; and after a
``kill -9`` of the driver the dashboard and runtime-env agents stay up for about a minute (they report the
raylet's death to the GCS, which died with it). Here:

- **127.0.0.1 as the node IP.** ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is Ray's single-machine mode (its
  default on macOS and Windows): the node IP is then 127.0.0.1 instead of the interface address
  (``ray.init(_node_ip_address="127.0.0.1")`` and ``ray start --node-ip-address=127.0.0.1`` are turned
  back into the interface address), and every Ray server binds 127.0.0.1. It is read when ray is first
  imported, so a process that imported ray earlier gets the constant set too, for the start only.
- **Token authentication without the warning.** Unless RAY_AUTH_MODE is set, the cluster uses token
  mode with a random token of this process, passed to Ray's processes in their environment and never
  written to disk, so another user of the machine cannot use the cluster.
- **No process left behind.** A guard process (distsim/runner/guard.py) holds a pipe from the driver and
  kills what is left of the session when the pipe closes, whatever ended the driver.
- No dashboard (``include_dashboard=False``; Ray still starts its head process with the usage-stats module
  only, listening on 127.0.0.1 for its metrics) and no usage stats.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from distsim.runner import startup

SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
START_TIMEOUT_S = 120.0  # runner.start_timeout_s's default
_TOKEN = secrets.token_hex(32)  # one per process: Ray caches the token a driver first used


def loopback_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that keep a Ray started with them on 127.0.0.1 and quiet (see the module doc).
    RAY_AUTH_MODE and RAY_AUTH_TOKEN are left alone when ``environ`` (default: os.environ) sets a mode."""
    environ = os.environ if environ is None else environ
    env = {SINGLE_MACHINE_ENV: "0", "RAY_USAGE_STATS_ENABLED": "0"}
    if "RAY_AUTH_MODE" not in environ:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=_TOKEN)
    return env


def _restore(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextmanager
def _single_machine() -> Iterator[None]:
    """Ray's single-machine constant, for a ray imported before our environment was set."""
    try:
        from ray._private import ray_constants

        before = ray_constants.ENABLE_RAY_CLUSTER
    except (ImportError, AttributeError):  # another Ray: the environment variable is all we have
        yield
        return
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _ray_rereads_settings() -> None:
    """Ray reads RAY_AUTH_MODE (with its other RAY_* settings) once, when first imported, and caches the
    token it loads: make it read both again, as ray.init does when it turns token mode on itself."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # another Ray: the environment, read at import, is all we have
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _ray_temp_dir() -> str:
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray")


def _start_guard() -> subprocess.Popen | None:
    """The clean-up process (guard.py), or None where /proc is missing (not Linux)."""
    if not Path("/proc/self/fd").is_dir():
        return None
    import ray

    programs = [os.path.realpath(sys.executable), str(Path(ray.__file__).resolve().parent) + os.sep]
    script = str(Path(__file__).with_name("guard.py"))
    return subprocess.Popen(
        [sys.executable, "-I", script, _ray_temp_dir(), str(os.getpid()), *programs],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


class LocalRay:
    """A started local Ray and its guard. ``stop`` shuts Ray down, lets the guard clean up and restores
    the environment variables ``start`` set."""

    def __init__(self, guard: subprocess.Popen | None, restore: dict[str, str | None]):
        self.guard = guard
        self._restore = restore

    def tell_session(self, session_dir: str) -> None:
        if self.guard is not None:
            self.guard.stdin.write(f"{session_dir}\n".encode())
            self.guard.stdin.flush()

    def stop(self) -> None:
        import ray

        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            self._release_guard()
            _restore(self._restore)
            _ray_rereads_settings()

    def abandon(self) -> None:
        """Leave Ray at once (Ctrl-C): the guard is told to kill the session's processes, in-flight jobs with
        them, and nothing waits for it or for ``ray.shutdown`` (1.5 s and more on a loaded machine). The
        process must then exit without Ray's exit handlers (distsim.runner.session.exit_now): they would
        wait on, and crash against, the killed processes."""
        if self.guard is not None:
            try:
                self.guard.stdin.close()  # EOF: the guard kills what is left of the session
            except OSError:
                pass
            self.guard = None
        _restore(self._restore)

    def _release_guard(self) -> None:
        if self.guard is None:
            return
        try:
            self.guard.stdin.close()
            self.guard.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.guard.kill()
            self.guard.wait()
        self.guard = None


def start(
    num_cpus: int | None = None, runtime_env: dict[str, Any] | None = None, start_timeout_s: float = START_TIMEOUT_S
) -> LocalRay:
    """``ray.init(address="local")`` on 127.0.0.1, without dashboard, warning or leftovers; a start that
    runs past ``start_timeout_s`` (runner.start_timeout_s) is cleaned up and tried once more, then raises
    distsim.runner.startup.RayStartError (one line)."""
    return startup.with_one_retry(lambda: _start_once(num_cpus, runtime_env), start_timeout_s)


def _start_once(num_cpus: int | None, runtime_env: dict[str, Any] | None) -> LocalRay:
    env = loopback_env()
    restore = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # before ray is imported where it is not yet: Ray reads them at import
    import ray

    _ray_rereads_settings()
    local = LocalRay(_start_guard(), restore)
    try:
        with _single_machine():
            context = ray.init(
                address="local", num_cpus=num_cpus, include_dashboard=False, runtime_env=runtime_env,
                log_to_driver=False, logging_level=logging.WARNING, configure_logging=True,
            )  # fmt: skip
    except BaseException:
        local.stop()  # the guard kills what the failed start left (its sessions are named after our pid)
        raise
    finally:  # Ray's processes have it now; a Ray this process joins later must not
        _restore({SINGLE_MACHINE_ENV: restore[SINGLE_MACHINE_ENV]})
    local.tell_session(context.address_info["session_dir"])
    return local
