"""``python -m distsim``: one simulation in-process (Hydra); ``-m`` runs a sweep.

A single run composes conf/config.yaml with the command-line overrides, simulates (with a progress line
on stderr when the run is long, see distsim.progress), writes summary.json, requests.parquet,
instances.parquet and perf.json into Hydra's run directory and prints a summary table.
A user's mistake prints one line and exits with status 2.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from distsim import outputs
from distsim.config.compose import CONF_DIR, skip_hydra_mode_compose
from distsim.config.schema import register_schemas
from distsim.errors import UserError, print_warnings_as_lines
from distsim.hydra_entry import install as install_hydra_entry
from distsim.provenance import mark_from_hydra
from distsim.run_dir import exit_if_unwritable

register_schemas()
print_warnings_as_lines()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from distsim.config.regret import regret_settings
    from distsim.progress import wanted
    from distsim.report_table import format_summary
    from distsim.simulate import simulate

    out_dir = HydraConfig.get().runtime.output_dir
    mark_from_hydra(cfg)  # the keys the user set: "set but not used" warns only of those
    regret = None
    try:
        outputs.prepare_dir(out_dir)  # a bad directory fails now, not after simulating
        replays = regret_settings(cfg)  # regret.* (off unless regret.samples > 0)
        if replays.enabled:
            regret = _with_regret(cfg, out_dir, replays)
            result = regret[0]
        else:
            result = simulate(cfg, progress=wanted(cfg.sim.progress, sys.stderr))
            result.write(out_dir, write_requests=bool(cfg.sim.write_requests))
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        sys.exit(2)
    except MemoryError:
        print("distsim: out of memory while simulating: fewer instances or requests, or a machine with more memory", file=sys.stderr)
        sys.exit(1)
    print(format_summary(result.summary, out_dir))
    if regret is not None:
        from distsim.regret.run import regret_line

        print(regret_line(regret[1]))
    return result.summary["fitness"]


def _with_regret(cfg: DictConfig, out_dir: str, replays):
    """The run, written as usual, then its sampled decisions replayed (distsim.regret): (result, regret.json)."""
    import time

    from distsim.progress import wanted
    from distsim.regret.run import check_supported, write_regret
    from distsim.resolve import resolve
    from distsim.simulate import run

    started = (time.perf_counter(), time.process_time())
    scenario = resolve(cfg)
    check_supported(scenario)  # before simulating
    result = run(scenario, started=started, progress=wanted(cfg.sim.progress, sys.stderr))
    result.write(out_dir, write_requests=bool(cfg.sim.write_requests))
    return result, write_regret(out_dir, scenario, result.requests, replays)


if __name__ == "__main__":
    exit_if_unwritable("distsim", CONF_DIR / "config.yaml")  # before Hydra creates it, with a traceback
    install_hydra_entry("distsim")  # Hydra's compose and .hydra/ errors as one line, exit 2
    skip_hydra_mode_compose()  # Hydra's extra compose that only reads hydra.mode (null for this tree)
    main()
