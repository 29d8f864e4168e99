"""Config: the schema registered in Hydra's ConfigStore (schema.py, with the runner, search and regret nodes
in runner.py, search.py and regret.py), composition as the command line does it (compose.py), and the
simulation's own controls, ``seed`` and ``sim.*`` (settings.py). Each feature checks its own section in its
own package, and distsim.resolve composes the checked settings into a Scenario."""

from distsim.config.schema import Config, register_schemas

__all__ = ["Config", "register_schemas"]
