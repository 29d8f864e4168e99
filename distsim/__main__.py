"""``python -m distsim``: one simulation in-process (Hydra); ``-m`` runs a sweep.

A single run composes conf/config.yaml with the command-line overrides, simulates (with a progress line
on stderr when the run is long, see distsim.progress), writes summary.json, requests.parquet,
instances.parquet and perf.json into Hydra's run directory and prints a summary table.
A user's mistake prints one line and exits with status 2; Ctrl-C prints one line saying what was kept and
exits 130 (each file is written whole or not at all, and an interrupted write keeps none of the run's).
"""

from __future__ import annotations

import gc
import sys

from distsim import command

with command.starting("distsim"):  # Ctrl-C while importing: one line, status 130
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
    # What the imports and the schema made lives as long as the process: frozen, no collection looks at it
    # again (they went through it at every full collection of the run and at exit: 0.08 CPU-s of a short run).
    gc.freeze()


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a single run, saying what the run directory holds: nothing of this run, or (during
    the regret replays) the run's complete outputs without regret.json."""


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from distsim.config.regret import regret_settings
    from distsim.metrics.fitness import fitness_label
    from distsim.progress import wanted

    out_dir = HydraConfig.get().runtime.output_dir
    mark_from_hydra(cfg)  # the keys the user set: "set but not used" warns only of those
    regret = None
    stage = f"interrupted while simulating: no output written ({out_dir})"
    try:
        outputs.prepare_dir(out_dir)  # a bad directory fails now, not after simulating
        replays = regret_settings(cfg)  # regret.* (off unless regret.samples > 0)
        scenario, result = _simulate(cfg, replays.enabled, wanted(cfg.sim.progress, sys.stderr))
        stage = f"interrupted while writing the outputs: none kept ({out_dir})"
        result.write(out_dir, write_requests=bool(cfg.sim.write_requests))
        if replays.enabled:
            from distsim.regret.run import write_regret

            stage = f"interrupted during the regret replays: the run's outputs are in {out_dir}, without regret.json"
            regret = write_regret(out_dir, scenario, result.requests, replays)
        stage = f"interrupted: the run's outputs are in {out_dir}"
        _report(result.summary, out_dir, regret, fitness_label(cfg.fitness))  # a full or closed stdout: an OutputError
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        sys.exit(2)
    except MemoryError:
        print("distsim: out of memory while simulating: fewer instances or requests, or a machine with more memory", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        raise RunInterrupted(stage) from None
    return result.summary["fitness"]


def _report(summary: dict, out_dir: str, regret: dict | None, fitness: str) -> None:
    """The summary table (and the regret line) on standard output, flushed: a failure is one line here."""
    from distsim.report_table import format_summary

    print(format_summary(summary, out_dir, fitness))
    if regret is not None:
        from distsim.regret.run import regret_line

        print(regret_line(regret))
    sys.stdout.flush()


def _simulate(cfg: DictConfig, with_regret: bool, progress: bool):
    """(scenario, result): the run; its resolved scenario too when regret replays follow (else None)."""
    import time

    from distsim.simulate import run, simulate

    if not with_regret:
        return None, simulate(cfg, progress=progress)
    from distsim.regret.run import check_supported
    from distsim.resolve import resolve

    started = (time.perf_counter(), time.process_time())
    scenario = resolve(cfg)
    check_supported(scenario)  # before simulating
    return scenario, run(scenario, started=started, progress=progress)


if __name__ == "__main__":
    exit_if_unwritable("distsim", CONF_DIR / "config.yaml")  # before Hydra creates it, with a traceback
    install_hydra_entry("distsim")  # Hydra's compose and .hydra/ errors as one line, exit 2
    skip_hydra_mode_compose()  # Hydra's extra compose that only reads hydra.mode (null for this tree)
    command.run("distsim", main)  # a full or closed stdout, and Ctrl-C, as one line
