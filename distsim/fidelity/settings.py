"""Typed access to the settings a measured run records (meta.json, run.json).

The recorded engine settings become ``cluster.engine.*`` overrides; a string where a number belongs
would otherwise be coerced or refused later under a config key the user never wrote, so each value is
checked here, against the field's type in :class:`EngineSettings`, with the file in the message.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from distsim.errors import InputFileError
from distsim.fidelity.run import EngineSettings
from distsim.inputs import excerpt

_KINDS = {"int | None": int, "float | None": float, "bool | None": bool}


def section(data: dict[str, Any], key: str, path: Path, where: str = "") -> dict[str, Any]:
    """The JSON object under ``key`` ({} when absent or null)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputFileError(path, f"'{where}{key}' must be a JSON object (got {type(value).__name__})")
    return value


def text(data: dict[str, Any], key: str, path: Path, where: str = "") -> str | None:
    """A string field (None when absent or null)."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise InputFileError(path, f"'{where}{key}' must be a string (got {excerpt(value)})")
    return value


def _checked(name: str, value: Any, label: str, path: Path) -> Any:
    if value is None:
        return None
    kind = _KINDS[EngineSettings.__dataclass_fields__[name].type]
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        rule = {bool: "true or false", int: "an integer", float: "a finite number"}[kind]
        raise InputFileError(path, f"'{label}' must be {rule} (got {excerpt(value)})")
    return value


def engine_settings(values: dict[str, tuple[str, Any]], path: Path) -> EngineSettings:
    """EngineSettings from ``{field: (label in the file, value)}``, each value type-checked."""
    return EngineSettings(**{name: _checked(name, v, label, path) for name, (label, v) in values.items()})
