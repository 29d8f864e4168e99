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
from distsim.run_dir import exit_if_unwritable

register_schemas()
print_warnings_as_lines()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from distsim.progress import wanted
    from distsim.report_table import format_summary
    from distsim.simulate import simulate

    out_dir = HydraConfig.get().runtime.output_dir
    try:
        outputs.prepare_dir(out_dir)  # a bad directory fails now, not after simulating
        result = simulate(cfg, progress=wanted(cfg.sim.progress, sys.stderr))
        result.write(out_dir, write_requests=bool(cfg.sim.write_requests))
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        sys.exit(2)
    except MemoryError:
        print("distsim: out of memory while simulating: fewer instances or requests, or a machine with more memory", file=sys.stderr)
        sys.exit(1)
    print(format_summary(result.summary, out_dir))
    return result.summary["fitness"]


if __name__ == "__main__":
    exit_if_unwritable("distsim", CONF_DIR / "config.yaml")  # before Hydra creates it, with a traceback
    install_hydra_entry("distsim")  # Hydra's compose and .hydra/ errors as one line, exit 2
    skip_hydra_mode_compose()  # Hydra's extra compose that only reads hydra.mode (null for this tree)
    main()
