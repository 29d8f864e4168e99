"""Config schemas (registered in Hydra's ConfigStore), composition and validation."""

from distsim.config.schema import Config, register_schemas

__all__ = ["Config", "register_schemas"]
