"""Resolving user-given file paths.

A relative path is looked up in the current working directory first, then in Hydra's original working
directory (when Hydra changed into a run directory), then in the repository root (the parent of the
``distsim`` package), so both ``workload.path=../shared/data/...`` and the shipped fixtures work.
"""

from __future__ import annotations

from pathlib import Path

from distsim.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _hydra_original_cwd() -> Path | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return Path(HydraConfig.get().runtime.cwd)
    except Exception:  # Hydra absent or not running: nothing to add
        return None
    return None


def resolve_path(key: str, path) -> Path:
    """The existing file ``path`` names, or a ConfigError naming ``key`` and the path."""
    if path is None or str(path).strip() == "":
        raise ConfigError(key, "a file path is required")
    p = Path(str(path)).expanduser()
    if p.is_absolute():
        candidates = [p]
    else:
        bases = [Path.cwd(), _hydra_original_cwd(), REPO_ROOT]
        candidates = [b / p for b in bases if b is not None]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    for c in candidates:
        if c.exists():  # a folder, a FIFO, a device: reading it would fail or never end
            kind = "a folder" if c.is_dir() else "not a regular file"
            raise ConfigError(key, f"{c} is {kind}; give a file")
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise ConfigError(key, f"file not found: {path} (looked in {looked})")
