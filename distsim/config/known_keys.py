"""Every key of a typed config section is one its schema declares, however it came in.

Why: Hydra's ``+key=value`` adds a key even where the schema is closed (a dataclass section), so a typo such
as ``+cluster.engine.enable_prefix_cache=false`` used to be carried along and never read, where the same key
without ``+`` is refused. The sections the schema leaves open (mappings: ``workload.types``, ``search.train``,
``fitness.weights``, a pool's ``engine``) still take new keys, each checked by its reader (a pool's engine
and latency by :func:`distsim.typed_merge.merge_onto`).
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, ListConfig

from distsim.errors import ConfigError

HYDRA = "hydra"  # Hydra's own node at the root of what its entry points compose: not distsim's schema


def check_known_keys(cfg: DictConfig) -> None:
    """Raise a ConfigError naming the first key of a typed section its schema does not declare, worded as
    the error for the same key given without ``+`` (the section's keys listed as known)."""
    todo: list[tuple[DictConfig | ListConfig, str]] = [(cfg, "")]
    while todo:
        node, path = todo.pop()
        if node._is_none() or node._is_missing() or node._is_interpolation():
            continue
        if isinstance(node, ListConfig):
            todo += [(c, f"{path}[{i}]") for i, c in enumerate(node._iter_ex(resolve=False)) if _is_container(c)]
            continue
        schema = node._metadata.object_type
        declared = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
        if not path:
            declared = None if declared is None else declared | {HYDRA}
        for name in node.keys():
            key = f"{path}.{name}" if path else str(name)
            if declared is not None and name not in declared:
                known = [str(n) for n in node.keys() if n in declared]
                if not path and HYDRA not in known:  # as Hydra's own error lists it: hydra.* are keys too
                    known.insert(0, HYDRA)
                raise ConfigError(key, f"unknown key; known: {', '.join(known)}")
            child = node._get_node(name)
            if _is_container(child) and key != HYDRA:
                todo.append((child, key))


def _is_container(node: object) -> bool:
    return isinstance(node, (DictConfig, ListConfig))
