"""llm-d's inference scheduler configuration (an ``EndpointPickerConfig`` file) read as distsim's weighted
routing, and written from it, so the profile a cluster runs today can be simulated and a searched one
deployed.

The format (apiVersion inference.networking.x-k8s.io/v1alpha1, kind EndpointPickerConfig): ``plugins`` is
a list of plugin instances (``type``, an optional ``name`` that profiles refer to, else the type, and
``parameters``); ``schedulingProfiles`` is a list of profiles, each a ``name`` and ``plugins`` that refer
to instances (``pluginRef``) with a ``weight`` for scorers. Filters, pickers and profile handlers carry no
weight. Which llm-d scorer is which distsim scorer (docs/guide/search.md has the table):

==========================  ==================  ===========================================================
llm-d plugin type           distsim scorer      note
==========================  ==================  ===========================================================
prefix-cache-scorer         prefix_affinity     lruCapacityPerServer -> policy.routing.prefix_index_blocks
queue-scorer                queue_depth         waiting requests, as the instance reports them
load-aware-scorer           queue_depth         llm-d's queue-threshold variant; read as queue depth
kv-cache-utilization-scorer kv_utilization      also under its older name kv-cache-scorer
active-request-scorer       load_balance        requests the router has in flight per endpoint
==========================  ==================  ===========================================================

``max-score-picker`` is distsim's pick (the highest total, ties broken at random); ``single-profile-handler``,
``pd-profile-handler``, ``prefill-header-handler``, ``decode-filter`` and ``prefill-filter`` are what distsim's
cluster does itself (one pool, or P/D pools by role). Any other plugin, a ``random-picker`` say, has no
distsim meaning and is refused, naming the file and line. llm-d has no load guard, so a policy read from a
file has none (``load_guard: .inf``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from distsim.errors import ConfigError

API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
KIND = "EndpointPickerConfig"
# distsim scorer -> the llm-d plugin type it is written as
EXPORT = {
    "prefix_affinity": "prefix-cache-scorer",
    "queue_depth": "queue-scorer",
    "kv_utilization": "kv-cache-utilization-scorer",
    "load_balance": "active-request-scorer",
}
# llm-d plugin type -> distsim scorer
IMPORT = {**{v: k for k, v in EXPORT.items()}, "kv-cache-scorer": "kv_utilization", "load-aware-scorer": "queue_depth"}
PICKER = "max-score-picker"
# plugins with no weight whose job distsim's cluster does itself
STRUCTURAL = {PICKER, "single-profile-handler", "pd-profile-handler", "prefill-header-handler", "decode-filter", "prefill-filter"}


@dataclass(frozen=True)
class EndpointPicker:
    """What distsim reads of a file: the scorer weights and the prefix index size (None: its default)."""

    weights: dict[str, float]
    prefix_index_blocks: int | None = None


class _LineLoader(yaml.SafeLoader):
    """Safe YAML with each mapping's line (1-based) under ``__line__``, for one-line errors."""


def _mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    out = loader.construct_mapping(node, deep=True)
    out["__line__"] = node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _fail(key: str, path: Path, line: int | None, rule: str) -> ConfigError:
    where = f"{path}:{line}" if line else str(path)
    return ConfigError(key, f"{where}: {rule}")


def read(path: str | Path, key: str = "policy.routing.endpoint_picker") -> EndpointPicker:
    """The weighted routing of an EndpointPickerConfig file; anything distsim cannot simulate is one line
    naming ``key``, the file and the line."""
    path = Path(path)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)  # noqa: S506 (a safe loader)
    except OSError as err:
        raise ConfigError(key, f"cannot read {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise _fail(key, path, mark.line + 1 if mark else None, "not YAML") from None
    if not isinstance(doc, Mapping) or doc.get("kind") != KIND:
        raise _fail(key, path, None, f"not an {KIND} (kind: {doc.get('kind') if isinstance(doc, Mapping) else None!r})")
    if doc.get("apiVersion") != API_VERSION:
        raise _fail(key, path, doc["__line__"], f"apiVersion must be {API_VERSION} (got {doc.get('apiVersion')!r})")
    instances = _instances(doc, key, path)
    profiles = doc.get("schedulingProfiles")
    if not isinstance(profiles, list) or not profiles:
        raise _fail(key, path, doc["__line__"], "needs schedulingProfiles: a list of profiles")
    read_profiles = [(p.get("name"), _profile(p, instances, key, path)) for p in profiles if isinstance(p, Mapping)]
    (first_name, first), *rest = read_profiles
    for name, weights in rest:
        if weights != first:
            raise _fail(key, path, None, f"profiles {first_name} and {name} weigh their scorers differently; distsim "
                        "routes every pool with one policy: keep one profile, or give them the same weights")  # fmt: skip
    if not first or sum(first.values()) <= 0:
        raise _fail(key, path, None, f"profile {first_name} has no scorer with a weight > 0")
    prefix = instances.get_param("prefix-cache-scorer", "lruCapacityPerServer")
    return EndpointPicker(first, int(prefix) if prefix is not None else None)


class _Instances(dict):
    """Plugin instance name -> (type, parameters, line)."""

    def get_param(self, kind: str, name: str) -> Any:
        for plugin_type, params, _ in self.values():
            if plugin_type == kind and name in params:
                return params[name]
        return None


def _instances(doc: Mapping, key: str, path: Path) -> _Instances:
    plugins = doc.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise _fail(key, path, doc["__line__"], "needs plugins: a list of plugin instances")
    out = _Instances()
    for p in plugins:
        if not isinstance(p, Mapping) or not isinstance(p.get("type"), str):
            raise _fail(key, path, getattr(p, "get", dict().get)("__line__"), "a plugin needs a type")
        kind, line = p["type"], p["__line__"]
        if kind not in IMPORT and kind not in STRUCTURAL:
            known = ", ".join(sorted([*IMPORT, *STRUCTURAL]))
            raise _fail(key, path, line, f"plugin type {kind!r} has no distsim counterpart (known: {known})")
        params = {k: v for k, v in (p.get("parameters") or {}).items() if k != "__line__"}
        out[str(p.get("name") or kind)] = (kind, params, line)
    return out


def _profile(profile: Mapping, instances: _Instances, key: str, path: Path) -> dict[str, float]:
    """One scheduling profile's weights per distsim scorer (two llm-d scorers of one kind add up)."""
    weights: dict[str, float] = {}
    for ref in profile.get("plugins") or ():
        name = ref.get("pluginRef") if isinstance(ref, Mapping) else None
        line = ref.get("__line__") if isinstance(ref, Mapping) else profile["__line__"]
        if name not in instances:
            raise _fail(key, path, line, f"pluginRef {name!r} names no plugin instance")
        kind = instances[name][0]
        if kind in STRUCTURAL:
            continue
        weight = ref.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise _fail(key, path, line, f"weight of {name} must be a finite number >= 0 (got {weight!r})")
        scorer = IMPORT[kind]
        weights[scorer] = weights.get(scorer, 0.0) + float(weight)
    return weights


def document(weights: Mapping[str, float], prefix_index_blocks: int | None = None, block_size: int | None = None) -> dict:
    """An EndpointPickerConfig (as a dict) with these scorer weights: one instance per scorer with a weight
    > 0, max-score-picker and single-profile-handler, one profile ``default``. A distsim scorer with no
    llm-d counterpart and a weight > 0 is refused."""
    missing = [n for n, w in weights.items() if w > 0 and n not in EXPORT]
    if missing:
        raise ConfigError("policy.routing.scorers", f"{', '.join(missing)} has no llm-d scorer: set its weight to 0 to export")
    plugins: list[dict] = [{"type": "single-profile-handler"}]
    refs: list[dict] = []
    for name in sorted(n for n, w in weights.items() if w > 0):
        plugin: dict[str, Any] = {"type": EXPORT[name]}
        if name == "prefix_affinity":
            params = {k: v for k, v in (("blockSize", block_size), ("lruCapacityPerServer", prefix_index_blocks)) if v is not None}
            if params:
                plugin["parameters"] = params
        plugins.append(plugin)
        refs.append({"pluginRef": EXPORT[name], "weight": float(weights[name])})
    plugins.append({"type": PICKER})
    refs.append({"pluginRef": PICKER})
    return {"apiVersion": API_VERSION, "kind": KIND, "plugins": plugins, "schedulingProfiles": [{"name": "default", "plugins": refs}]}


# ---------------------------------------------------------------- the router: weighted, its weights from a file
from distsim.policies.base import ROUTERS  # noqa: E402 (the reader above is the module's concept; this is its router)
from distsim.policies.weighted import Weighted, WeightedParams  # noqa: E402


@dataclass(frozen=True)
class EndpointPickerParams(WeightedParams):
    endpoint_picker: str | None = None  # the EndpointPickerConfig file (required)

    @classmethod
    def from_node(cls, node):
        """The weights (and the prefix index's size, lruCapacityPerServer) are the file's."""
        from dataclasses import replace

        params = super().from_node(node)
        if params.endpoint_picker is None:
            raise ConfigError("policy.routing.endpoint_picker", "routing kind endpoint_picker needs the file: "
                              "policy.routing.endpoint_picker=path/to/epp.yaml")  # fmt: skip
        if params.scorers:
            raise ConfigError("policy.routing.scorers", "the endpoint_picker file sets the weights: leave scorers empty")
        picker = read(params.endpoint_picker)
        blocks = params.prefix_index_blocks if picker.prefix_index_blocks is None else picker.prefix_index_blocks
        return replace(params, scorers=picker.weights, prefix_index_blocks=blocks)


@ROUTERS.register("endpoint_picker")
class EndpointPickerRouter(Weighted):
    """llm-d's scheduler as its EndpointPickerConfig sets it: distsim's weighted routing with the file's weights."""

    Params = EndpointPickerParams
