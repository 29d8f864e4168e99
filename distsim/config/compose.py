"""Compose the config tree with Hydra, as the command line does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from distsim.config.schema import register_schemas
from distsim.errors import UserError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


class OverrideError(UserError):
    """An override Hydra could not apply (unknown key or group option, wrong type)."""


def load_config(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """Compose ``conf/config.yaml`` with command-line style overrides, e.g. ``["policy=random"]``."""
    if not CONF_DIR.is_dir():
        raise UserError(f"config error: the config tree {CONF_DIR} is missing (install with `pip install -e .`)")
    register_schemas()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="distsim"):
            return compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise OverrideError(f"config error: {str(err).splitlines()[0]}") from None
