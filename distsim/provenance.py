"""Which config keys the user set, so that a "set but not used" warning speaks only of those.

Why: a warning about a key nobody set (the default workload's arrival process, under ``workload.kind=trace``)
teaches users to ignore warnings. The user sets a key with an override (``workload.kind=trace``), or a
whole section by choosing a group option (``workload=mmpp_burst``: what that file sets); every other value
is inherited from the shipped configs and never warns. Where a config is composed (load_config, the entry
points, each configuration of a sweep), :func:`mark` flags the nodes the overrides set: an OmegaConf flag,
so the marks travel with the config (deep copies, and the pickles a sweep sends its workers, included).
:func:`distsim.resolve.resolve` reads them (:func:`scope`) for the checks it runs, which ask
:func:`user_set`. A config without marks (built by hand, or from the user's own config file) counts every
key as set.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from omegaconf import DictConfig, ListConfig

_FLAG = "distsim_user_set"  # True on a node an override set; False on the root of a marked config
_KEYS: ContextVar[frozenset[str] | None] = ContextVar("distsim_user_set_keys", default=None)


def mark(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """Flag the nodes of ``cfg`` that ``overrides`` (command-line overrides, as composed) set; returns ``cfg``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg._set_flag(_FLAG, False)
    for parsed in OverridesParser.create().parse_overrides(list(overrides)):  # composed already: they parse
        if parsed.is_delete():
            continue
        path = (parsed.package or parsed.key_or_group).replace("/", ".")
        node = _node(cfg, path)
        if node is not None:
            node._set_flag(_FLAG, True)
    return cfg


def mark_from_hydra(cfg: DictConfig) -> DictConfig:
    """Mark the config an entry point's ``@hydra.main`` got, from Hydra's record of the command line; a
    config from the user's own files (``--config-dir``, ``--config-name``) stays unmarked: all of it theirs."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    own = hc.job.config_name not in ("config", "search", "search_routing") or any(
        s.get("provider") == "command-line" for s in hc.runtime.config_sources
    )
    return cfg if own else mark(cfg, list(hc.overrides.task))


def _node(cfg: DictConfig, path: str) -> object | None:
    """The node at the dotted ``path`` (list items by index), or None where there is none (``hydra.*``)."""
    node: object = cfg
    for part in path.split("."):
        if isinstance(node, DictConfig) and part in node:
            node = node._get_node(part)
        elif isinstance(node, ListConfig) and part.isdigit() and int(part) < len(node):
            node = node._get_node(int(part))
        else:
            return None
    return node


def marked_keys(cfg: DictConfig) -> frozenset[str] | None:
    """The dotted keys (list items as ``[i]``) of the marked nodes; None for an unmarked config."""
    if cfg._get_node_flag(_FLAG) is None:
        return None
    keys: set[str] = set()
    todo: list[tuple[object, str]] = [(cfg, "")]
    while todo:
        node, path = todo.pop()
        if path and node._get_node_flag(_FLAG):  # type: ignore[attr-defined]
            keys.add(path)
            continue  # everything below is the user's too
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            todo += [(node._get_node(k), f"{path}.{k}" if path else str(k)) for k in node.keys()]
        elif isinstance(node, ListConfig) and not node._is_none() and not node._is_missing():
            todo += [(node._get_node(i), f"{path}[{i}]") for i in range(len(node))]
    return frozenset(keys)


@contextmanager
def scope(cfg: DictConfig) -> Iterator[None]:
    """Within: :func:`user_set` answers for ``cfg``'s marks."""
    token = _KEYS.set(marked_keys(cfg))
    try:
        yield
    finally:
        _KEYS.reset(token)


def user_set(key: str) -> bool:
    """Whether the user set ``key`` (a dotted key, list items as ``[i]``) or a section holding it; True
    outside :func:`scope` or for an unmarked config."""
    keys = _KEYS.get()
    if keys is None:
        return True
    return any(key == k or key.startswith((f"{k}.", f"{k}[")) for k in keys)


def user_set_within(section: str) -> bool:
    """Whether the user set ``section``, a section holding it, or any key inside it."""
    keys = _KEYS.get()
    return keys is None or user_set(section) or any(k.startswith((f"{section}.", f"{section}[")) for k in keys)
