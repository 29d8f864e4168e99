"""Small validators of config values: each returns the checked value or raises ConfigError naming the key.

At the bottom of the layers (docs/reading_guide.md, "The layers"): every feature's settings module
(distsim.cluster.settings, distsim.metrics.settings, distsim.autoscale.settings, distsim.runtime.settings, ...),
the workload's modules (through distsim.workload.checks) and the plug-ins' parameters check their keys with
these; they import nothing of distsim but its errors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping

from distsim.errors import ConfigError, warn_config
from distsim.provenance import user_set_within


def required(key: str, value, why: str):
    """Return ``value``; a null means the user left out a key that ``why`` needs."""
    if value is None:
        raise ConfigError(key, f"required {why}")
    return value


def number(key: str, value, *, low: float | None = None, strict: bool = False) -> float:
    """A finite number, at least ``low`` (greater than it when ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a number (got {value!r})")
    x = float(value)
    if not math.isfinite(x):
        raise ConfigError(key, f"must be finite (got {value!r})")
    if low is not None and (x <= low if strict else x < low):
        raise ConfigError(key, f"must be {'>' if strict else '>='} {low:g} (got {value!r})")
    return x


def positive(key: str, value) -> float:
    return number(key, value, low=0.0, strict=True)


def non_negative(key: str, value) -> float:
    return number(key, value, low=0.0)


def integer(key: str, value, *, low: int | None = None) -> int:
    """An integer (a float with an integral value is accepted), at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
        raise ConfigError(key, f"must be an integer (got {value!r})")
    n = int(value)
    if low is not None and n < low:
        raise ConfigError(key, f"must be >= {low} (got {value!r})")
    return n


def fraction(key: str, value) -> float:
    x = number(key, value)
    if not 0.0 <= x <= 1.0:
        raise ConfigError(key, f"must be in [0, 1] (got {value!r})")
    return x


def number_list(key: str, values, *, low: float = 0.0, strict: bool = False) -> list[float]:
    """A non-empty list of numbers, each checked like :func:`number` with its index in the key."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ConfigError(key, f"must be a list of numbers (got {values!r})")
    values = list(values)
    if not values:
        raise ConfigError(key, "must not be empty")
    return [number(f"{key}[{i}]", v, low=low, strict=strict) for i, v in enumerate(values)]


def choice(key: str, value, options) -> str:
    if value not in options:
        raise ConfigError(key, f"unknown {value!r}; choose from {', '.join(sorted(options))}")
    return value


def ms_to_us(key: str, value) -> int:
    """A duration in milliseconds >= 0 as integer microseconds."""
    return int(round(non_negative(key, value) * 1000))


def _plain(value: object) -> object:
    """A config value as plain Python (mappings and lists of OmegaConf, dataclass defaults) for comparing."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "_metadata"):  # an OmegaConf DictConfig or ListConfig
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def warn_unread(node: Mapping[str, object], key: str, reads: Collection[str], why: str, defaults: object = None) -> None:
    """Warn about every key of ``node`` that is set although the chosen kind does not read it (only the
    names in ``reads``): ``KEY.NAME: is set, but WHY``, e.g. why = "dist 'lognormal' does not use it".

    Set means not null or empty and not the schema's default (``defaults``: the dataclass or mapping the
    node was built from; None: every default is null) and set by the user (distsim.provenance). A
    default is no one's setting: the default workload's lognormal lengths keep the schema's ``value: 512``
    beside ``mu`` and ``sigma``, unread; nor is a value inherited from a config the user did not choose."""
    for name, value in node.items():
        default = None
        if defaults is not None:
            default = defaults.get(name) if isinstance(defaults, dict) else getattr(defaults, name, None)
        if name not in reads and is_set(value, default) and user_set_within(f"{key}.{name}"):
            warn_config(f"{key}.{name}", f"is set, but {why}")


def is_set(value: object, default: object = None) -> bool:
    """Whether a config value says something: not null or empty, and not its schema ``default``."""
    value = _plain(value)
    return value not in (None, {}, []) and value != _plain(default)
