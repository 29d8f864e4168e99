"""Config: the schema (registered in Hydra's ConfigStore), composition, the small validators, the sim section's
settings, and resolve (scenario.py), which composes the settings each feature checks in its own package."""

from distsim.config.schema import Config, register_schemas

__all__ = ["Config", "register_schemas"]
