"""OmegaConf's refusals in distsim's words, and a mapping the user wrote where the schema could not type it
merged onto the typed node it overrides.

Why: a pool's ``engine`` and ``latency`` (``cluster.pools[i]``) are open mappings in the schema (a pool gives
only what differs from ``cluster.engine`` and ``cluster.latency``), so Hydra does not check them when it
composes; OmegaConf checks them only when they are merged onto the cluster's typed node, and its refusal
was a traceback. :func:`merge_onto` words it as a command-line override's error: one ConfigError naming
the key (``cluster.pools[0].engine.async_scheduling``) and the rule with the value given.
"""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from distsim.errors import ConfigError

# OmegaConf's type refusals (omegaconf 2.3's wording) -> the rule in distsim's words
_TYPE_RULES = (
    ("could not be converted to Float", "must be a number"),
    ("could not be converted to Integer", "must be an integer"),
    ("is not a valid bool", "must be true or false"),
    ("to string", "must be a string"),
)


def first_line(err: BaseException) -> str:
    """The first line of an error that says something (Hydra adds a line about HYDRA_FULL_ERROR)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip() and not ln.startswith("Set the environment")]
    return lines[0] if lines else type(err).__name__


def _is_optional(cause: OmegaConfBaseException) -> bool:
    """Whether the schema lets the refused key be null."""
    try:
        return bool(cause.parent_node._get_node(cause.key)._is_optional())
    except Exception:  # a list element, or a node OmegaConf did not keep: say nothing about null
        return False


def omegaconf_rule(cause: OmegaConfBaseException, outer: str) -> str:
    """The rule an OmegaConf refusal broke, in one phrase with the value given (``outer``: Hydra's line, or
    "" where OmegaConf refused on its own, as in a merge)."""
    text = first_line(cause)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and text.startswith("Key "):
        known = list(cause.parent_node.keys()) if hasattr(cause.parent_node, "keys") else []
        if known:
            return f"unknown key; known: {', '.join(map(str, known))}"
        hint = outer.partition("To append to your config use ")[2]  # an open mapping (workload.types): '+' adds
        return f"unknown key{f'; add it with {hint}' if hint else ''}"
    if isinstance(cause, ValidationError):
        if "is not Optional" in text or text.startswith("Incompatible value 'None'"):
            return "may not be null"
        for phrase, rule in _TYPE_RULES:
            if phrase in text:
                return f"{rule}{', or null' if _is_optional(cause) else ''} (got {cause.value!r})"
    return text


def merge_onto(base: DictConfig, given: Mapping | None, key: str) -> DictConfig:
    """``given`` merged onto a copy of the typed node ``base``; ``key`` is where ``given`` was written."""
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError(key, f"must be a mapping of keys to values (got {given!r})")
    try:
        return OmegaConf.merge(base, given)
    except OmegaConfBaseException as err:
        raise ConfigError(f"{key}.{_within(err, base)}", omegaconf_rule(err, "")) from None


def _within(err: OmegaConfBaseException, base: DictConfig) -> str:
    """The refused key's path below ``base`` (OmegaConf names it from the root of the tree ``base`` is in)."""
    full, prefix = str(err.full_key or err.key or "?"), base._get_full_key(None)
    return full[len(prefix) + 1:] if prefix and full.startswith(f"{prefix}.") else full
