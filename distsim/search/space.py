"""The search space: ``policy.*`` config keys with float, integer or categorical ranges.

The optimiser works in a normalised space (floats in [0, 1], integers and categories as index
values); :meth:`SearchSpace.overrides` turns a point back into Hydra overrides, rounded so that the
overrides (and the emitted YAML) read well and are identical run to run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from distsim.errors import ConfigError

# a searched key's config value: a float, an int, or a categorical choice (a YAML scalar)
Value = float | int | str | bool | None
# a point's coordinate in the normalised space: a float in [0, 1], or an integer or category index
Coordinate = float | int


@dataclass(frozen=True)
class Variable:
    key: str
    kind: str  # float | int | categorical
    low: float = 0.0
    high: float = 1.0
    choices: tuple = ()

    def value(self, u: Coordinate) -> Value:
        """The config value of a normalised coordinate (float in [0, 1]; int or category index)."""
        if self.kind == "float":
            u = min(max(float(u), 0.0), 1.0)
            return float(f"{self.low + u * (self.high - self.low):.4g}")
        if self.kind == "int":
            return int(u)
        return self.choices[int(u)]


class SearchSpace:
    def __init__(self, spec: Mapping[str, Mapping[str, object] | None]):
        if not spec:
            raise ConfigError("search.space", "is empty: name at least one policy.* key to search")
        self.variables: list[Variable] = []
        for key, raw in spec.items():
            where = f"search.space.{key}"
            if not str(key).startswith("policy."):
                raise ConfigError(where, "only policy.* keys can be searched (the result is a policy config)")
            raw = dict(raw or {})
            kind = raw.get("type")
            if kind in ("float", "int"):
                low, high = raw.get("low"), raw.get("high")
                if (
                    low is None
                    or high is None
                    or not (math.isfinite(low) and math.isfinite(high))
                    or not low < high
                ):
                    raise ConfigError(where, f"needs finite low < high (got low={low!r}, high={high!r})")
                if kind == "int" and (int(low) != low or int(high) != high):
                    raise ConfigError(where, "int bounds must be integers")
                self.variables.append(Variable(str(key), kind, float(low), float(high)))
            elif kind == "categorical":
                choices = tuple(raw.get("choices") or ())
                if len(choices) < 2:
                    raise ConfigError(where, "categorical needs at least two choices")
                self.variables.append(Variable(str(key), kind, choices=choices))
            else:
                raise ConfigError(f"{where}.type", f"must be float, int or categorical (got {kind!r})")

    @property
    def floats(self) -> list[Variable]:
        return [v for v in self.variables if v.kind == "float"]

    @property
    def ints(self) -> list[Variable]:
        return [v for v in self.variables if v.kind == "int"]

    @property
    def categoricals(self) -> list[Variable]:
        return [v for v in self.variables if v.kind == "categorical"]

    def values(self, point: dict[str, Coordinate]) -> dict[str, Value]:
        """Config values of a point given as {key: normalised coordinate}."""
        return {v.key: v.value(point[v.key]) for v in self.variables}

    @staticmethod
    def overrides(values: dict[str, Value]) -> list[str]:
        return [f"{key}={_literal(val)}" for key, val in values.items()]


_BARE = re.compile(r"[A-Za-z_][\w.\-/:]*")  # a string Hydra reads back as itself, unquoted
_KEYWORDS = {"true", "false", "null", "nan", "inf", "yes", "no", "on", "off", "none"}


def _literal(value: Value) -> str:
    if isinstance(value, str) and (not _BARE.fullmatch(value) or value.lower() in _KEYWORDS):
        # quoted, so Hydra reads it back as this string: an expression, a number-like or YAML word
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)
