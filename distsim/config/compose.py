"""Compose the config tree with Hydra, as the command line does."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from distsim.config.known_keys import check_known_keys
from distsim.config.schema import register_schemas
from distsim.errors import ConfigError, UserError
from distsim.provenance import mark as mark_user_set
from distsim.typed_merge import first_line, omegaconf_rule

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


class OverrideError(ConfigError):
    """An override or config file Hydra could not compose (wrong type, unknown key or group option)."""


def composition_error(err: BaseException) -> OverrideError:
    """Hydra's or OmegaConf's refusal to compose (a type error, an unknown key or group option, an override
    it cannot parse) as one line naming the key and the rule; Hydra's own message spans several lines."""
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and "/" in err.missing_cfg_file:
        group, name = err.missing_cfg_file.rsplit("/", 1)
        known = f"; known: {', '.join(err.options)}" if err.options else ""
        return OverrideError(group.replace("/", "."), f"no config {name!r} in group {group}{known}")
    if isinstance(err, OverrideParseException):
        return OverrideError(err.override.split("=", 1)[0] or err.override, f"cannot parse {err.override!r}: {first_line(err)}")
    cause = err if isinstance(err, OmegaConfBaseException) else err.__cause__
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        key = str(cause.full_key)
        outer = first_line(err)
        hint = " ".join(str(err).split())
        if outer.startswith("Error merging override "):  # a key inside a list an override gives has no prefix
            target = outer.removeprefix("Error merging override ").split("=", 1)[0].lstrip("+~")
            if not key.startswith(target):
                key = f"{target}: {key}"
        return OverrideError(key, omegaconf_rule(cause, hint))
    return OverrideError("overrides", first_line(err))


def load_config(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """Compose ``conf/config.yaml`` with command-line style overrides, e.g. ``["policy=random"]``."""
    if not CONF_DIR.is_dir():
        raise UserError(f"config error: the config tree {CONF_DIR} is missing (install with `pip install -e .`)")
    register_schemas()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="distsim"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise composition_error(err) from None
    check_known_keys(cfg)  # a key added with + where the schema is closed
    return mark_user_set(cfg, overrides)  # the keys the user set ("set but not used" warns only of those)


# Overrides that could set hydra.mode (or bring in configs that do); any of them keeps Hydra's own lookup.
_MODE_KEYS = ("hydra.mode", "hydra.searchpath", "hydra/")


def mode_is_unset(argv: Sequence[str]) -> bool:
    """Will ``hydra.mode`` be null for this command line? distsim's config tree never sets it
    (tests/test_startup.py checks every file), so only an override or another config tree can."""
    from hydra._internal.utils import get_args_parser

    try:
        args, _ = get_args_parser().parse_known_args(list(argv))
    except SystemExit:  # a malformed command line: Hydra reports it
        return False
    if args.config_name or args.config_path or args.config_dir:
        return False
    return not any(text.lstrip("+~").startswith(_MODE_KEYS) for text in args.overrides)


def skip_hydra_mode_compose(argv: Sequence[str] | None = None) -> bool:
    """Spare ``python -m distsim`` Hydra's first compose of the whole config, when it is known to give null.

    Why: before a run or a multirun, Hydra 1.3 composes the whole config once only to read ``hydra.mode``
    (``Hydra.get_mode``), then composes it again for the run itself: about 0.15 CPU-s, a tenth of a short
    run's process. Its answer for distsim's tree is null unless the command line sets the mode or brings
    other configs in (:func:`mode_is_unset`), and Hydra goes on exactly as with null (it picks the mode from
    ``-m``). Only then is ``get_mode`` replaced, in this process, by one that returns null at once.
    Returns whether it was replaced.
    """
    from hydra._internal.hydra import Hydra

    if not hasattr(Hydra, "get_mode") or not mode_is_unset(sys.argv[1:] if argv is None else argv):
        return False
    Hydra.get_mode = _mode_unset  # type: ignore[method-assign]
    return True


def _mode_unset(self, config_name: str | None, overrides: list[str]) -> None:
    """Hydra.get_mode's answer for distsim's config tree when the command line leaves the mode alone."""
    return None
