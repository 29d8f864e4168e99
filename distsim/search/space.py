"""The search space: ``policy.*`` config keys with float, integer or categorical ranges.

The optimiser works in a normalised space (floats in [0, 1], integers and categories as index
values); :meth:`SearchSpace.overrides` turns a point back into Hydra overrides, rounded so that the
overrides (and the emitted YAML) read well and are identical run to run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from distsim.errors import ConfigError

# a searched key's config value: a float, an int, or a categorical choice (a YAML scalar)
Value = float | int | str | bool | None
# a point's coordinate in the normalised space: a float in [0, 1], or an integer or category index
Coordinate = float | int


# Keys a candidate may set: the policy (its file), and the parts of the control plane around it that a
# bundle searches (distsim.search.bundle): the engine's scheduling order and limits, the pools' sizes (the
# prefill:decode split), the autoscaler's thresholds.
BUNDLE_PREFIXES = ("cluster.engine.", "cluster.pools.", "cluster.autoscale.", "bundle.")


@dataclass(frozen=True)
class Variable:
    key: str
    kind: str  # float | int | categorical
    low: float = 0.0
    high: float = 1.0
    choices: tuple = ()
    name: str = ""  # its short name in search.space
    # the part it belongs to is on only when these searched keys (by short name) take one of these values:
    # admission parameters only with their admission kind, aging only with an ordered queue
    when: tuple[tuple[str, tuple], ...] = ()

    def value(self, u: Coordinate) -> Value:
        """The config value of a normalised coordinate (float in [0, 1]; int or category index)."""
        if self.kind == "float":
            u = min(max(float(u), 0.0), 1.0)
            return float(f"{self.low + u * (self.high - self.low):.4g}")
        if self.kind == "int":
            return int(u)
        return self.choices[int(u)]


class SearchSpace:
    """``spec`` maps a name to an entry. The entry names its config key (``key: policy.x.y``) and the
    name is short, so that the command line can reach it (``search.space.queue_depth.high=8``), or it has
    no ``key`` and the name is the config key itself (the older form, whose dotted names Hydra's
    override grammar cannot address). A later entry for a key already searched replaces the earlier one,
    so the older command-line form ``search.space={policy.x.y: {...}}`` (which Hydra merges into the
    map) still sets that key's range."""

    def __init__(self, spec: Mapping[str, Mapping[str, object] | None]):
        if not spec or all(raw is None for raw in spec.values()):
            raise ConfigError("search.space", "is empty: name at least one policy.* key to search")
        self.variables: list[Variable] = []
        for name, raw in spec.items():
            where = f"search.space.{name}"
            if raw is None:  # search.space.load_guard=null drops an entry, as ~search.space.load_guard does
                continue
            raw = dict(raw or {})
            key = raw.pop("key", name)
            if not isinstance(key, str) or not key.startswith(("policy.", *BUNDLE_PREFIXES)):
                where = f"{where}.key" if "key" in dict(spec[name] or {}) else where
                raise ConfigError(
                    where, "only policy.* and the bundle's keys (cluster.engine.*, cluster.pools.*, "
                    "cluster.autoscale.*, bundle.pd_prefill_share) can be searched"
                )
            when = _when(raw.pop("when", None), f"{where}.when")
            variable = replace(_variable(key, raw, where), name=str(name), when=when)
            known = [i for i, v in enumerate(self.variables) if v.key == key]
            if known:  # a later entry for the same key replaces it: search.space={policy.x.y: {...}} merges
                self.variables[known[0]] = variable
            else:
                self.variables.append(variable)
        self.check_when()

    @property
    def floats(self) -> list[Variable]:
        return [v for v in self.variables if v.kind == "float"]

    @property
    def ints(self) -> list[Variable]:
        return [v for v in self.variables if v.kind == "int"]

    @property
    def categoricals(self) -> list[Variable]:
        return [v for v in self.variables if v.kind == "categorical"]

    def check_when(self) -> None:
        """Every ``when`` names a categorical of this space and some of its choices."""
        by_name = {v.name: v for v in self.variables}
        for v in self.variables:
            for other, allowed in v.when:
                target = by_name.get(other)
                where = f"search.space.{v.name}.when.{other}"
                if target is None or target.kind != "categorical":
                    raise ConfigError(where, "must name a categorical entry of search.space")
                unknown = [a for a in allowed if a not in target.choices]
                if unknown:
                    raise ConfigError(where, f"{unknown} are not choices of {other} ({list(target.choices)})")

    def values(self, point: dict[str, Coordinate]) -> dict[str, Value]:
        """Config values of a point given as {key: normalised coordinate}; a variable whose part is off
        (its ``when`` unmet) is left out, so a candidate sets only the keys of the parts it has."""
        named = {v.name: v.value(point[v.key]) for v in self.variables}
        return {
            v.key: named[v.name]
            for v in self.variables
            if all(named.get(other) in allowed for other, allowed in v.when)
        }

    @staticmethod
    def overrides(values: dict[str, Value]) -> list[str]:
        return [f"{key}={_literal(val)}" for key, val in values.items()]


def _when(raw: object, where: str) -> tuple[tuple[str, tuple], ...]:
    """``when: {admission: [token_bucket]}`` (or a single value) as ((name, (values...)), ...)."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(where, f"must map a categorical entry's name to its values (got {raw!r})")
    out = []
    for other, allowed in raw.items():
        values = (allowed,) if allowed is None or isinstance(allowed, (str, int, float, bool)) else tuple(allowed)
        out.append((str(other), values))
    return tuple(out)


def _variable(key: str, raw: dict, where: str) -> Variable:
    kind = raw.get("type")
    if kind in ("float", "int"):
        low, high = raw.get("low"), raw.get("high")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high)):
            raise ConfigError(where, f"needs numbers low < high (got low={low!r}, high={high!r})")
        if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
            raise ConfigError(where, f"needs finite low < high (got low={low!r}, high={high!r})")
        if kind == "int" and (int(low) != low or int(high) != high):
            raise ConfigError(where, "int bounds must be integers")
        return Variable(key, kind, float(low), float(high))
    if kind == "categorical":
        choices = tuple(raw.get("choices") or ())
        if len(choices) < 2:
            raise ConfigError(where, "categorical needs at least two choices")
        return Variable(key, kind, choices=choices)
    raise ConfigError(f"{where}.type", f"must be float, int or categorical (got {kind!r})")


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
