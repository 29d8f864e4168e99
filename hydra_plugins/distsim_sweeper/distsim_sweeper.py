"""The Hydra Sweeper plugin behind ``python -m distsim -m ...``.

Hydra finds this module by scanning the ``hydra_plugins`` namespace package, imports it (so it must stay
cheap: no Ray, no pandas at import time), and instantiates :class:`DistsimSweeper` from the config stored
below when ``hydra/sweeper: distsim`` is selected (conf/config.yaml makes it the default). The sweeper does
not use a Hydra launcher: it hands the whole sweep to distsim.runner, which composes each distinct
configuration once and runs the jobs on Ray.

No ``from __future__ import annotations`` here: Hydra executes this module before putting it in
sys.modules, and dataclasses cannot resolve string annotations then.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


@dataclass
class DistsimSweeperConf:
    _target_: str = "hydra_plugins.distsim_sweeper.distsim_sweeper.DistsimSweeper"
    # sweep definitions in the config, as with Hydra's basic sweeper: {key: "a,b"}; the command line adds to them
    params: dict[str, str] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="distsim", node=DistsimSweeperConf, provider="distsim"
)


class DistsimSweeper(Sweeper):
    def __init__(self, params: dict[str, str] | None = None) -> None:
        self.params = dict(params or {})
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        # task_function (the single-run main) is not used: workers call distsim.simulate directly.
        self.hydra_context = hydra_context
        self.config = config

    def sweep(self, arguments: list[str]) -> Any:
        from distsim.errors import UserError
        from distsim.runner.plan import plan_sweep
        from distsim.runner.settings import RunnerSettings
        from distsim.runner.sweep import run_sweep

        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        master = self.config
        try:
            parser = OverridesParser.create(config_loader=loader)
            plan = plan_sweep([*(f"{k}={v}" for k, v in self.params.items()), *arguments], parser)
            settings = RunnerSettings.from_node(master.get("runner"))
            outcome = run_sweep(
                plan,
                lambda ovs: loader.load_sweep_config(master, list(ovs)),
                Path(str(master.hydra.sweep.dir)),
                settings,
                records={"multirun.yaml": OmegaConf.to_yaml(master)},
            )
        except UserError as err:
            print(f"distsim: {err}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt as err:  # SweepInterrupted: the finished jobs' tables are written
            print(f"\ndistsim: {err or 'interrupted'}", file=sys.stderr)
            sys.exit(130)
        if outcome.exit_code:
            sys.exit(outcome.exit_code)
        return outcome
