"""A policy's own figures in summary.json: ``policy.metrics``, from each router's and admission policy's
``metrics()`` (distsim.policies.base.Policy). On only when a configured class overrides ``metrics``, so a
run whose policies keep no figures has no section and pays nothing.

The section: ``{"metrics": {"routing": {...}, "admission": {...}, "decode_routing": {...}}}`` (the roles
whose policy has figures; decode_routing under P/D); with cells, one such dict per cell under ``cells``.
The figures must be finite numbers (or dicts of them, by string name): anything else is one error naming
the policy, never a file a JSON reader chokes on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from distsim.errors import ConfigError
from distsim.feature import Feature, Measures, Parts
from distsim.policies.base import reports_metrics

ROLES = (("routing", "router"), ("admission", "admission"), ("decode_routing", "decode_router"))


class PolicyMetricsFeature(Feature):
    name = "policy"

    def __init__(self) -> None:
        self.parts: Parts | None = None

    def attach(self, parts: Parts) -> None:
        self.parts = parts

    def report(self, m: Measures) -> dict[str, Any] | None:
        assert self.parts is not None
        per_cluster = [figures_of(cluster) for cluster in self.parts.clusters]
        if len(per_cluster) == 1:
            return {"metrics": per_cluster[0]}
        return {"metrics": {"cells": per_cluster}}


def figures_of(cluster: Any) -> dict[str, Any]:
    """One cluster's policies' figures, by role, checked."""
    found: dict[str, Any] = {}
    for role, attr in ROLES:
        policy = getattr(cluster, attr, None)
        if policy is None or not reports_metrics(type(policy)):
            continue
        figures = policy.metrics()
        if figures is not None:
            found[role] = checked(figures, type(policy).__name__, role)
    return found


def checked(figures: object, who: str, role: str) -> dict[str, Any]:
    """``figures`` as JSON-safe plain numbers; a non-finite or non-numeric value is one ConfigError."""
    key = f"policy.{'routing' if role != 'admission' else 'admission'}"
    if not isinstance(figures, Mapping):
        raise ConfigError(
            key, f"{who}.metrics() returned {type(figures).__name__}: give a dict of numbers by name"
        )
    out: dict[str, Any] = {}
    for name, value in figures.items():
        if not isinstance(name, str):
            raise ConfigError(key, f"{who}.metrics(): the name {name!r} is not a string")
        if isinstance(value, Mapping):
            out[name] = checked(value, who, role)
        elif isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)
        ):
            raise ConfigError(key, f"{who}.metrics()[{name!r}] is {value!r}: a figure is a finite number")
        elif isinstance(value, (int, np.integer)):
            out[name] = int(value)
        elif math.isfinite(value):
            out[name] = float(value)
        else:
            raise ConfigError(key, f"{who}.metrics()[{name!r}] is {value!r}: a figure is a finite number")
    return out
