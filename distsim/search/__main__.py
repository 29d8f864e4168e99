"""``python -m distsim.search``: evolutionary policy search (conf/search.yaml, Hydra overrides).

Scenario overrides (cluster, workload, signals, fitness) apply to every evaluation, after each
family's own (distsim.search.families); search.* settings steer the search. The output directory is
Hydra's run directory.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from distsim import command
from distsim.config.compose import CONF_DIR
from distsim.config.schema import register_schemas
from distsim.errors import UserError
from distsim.hydra_entry import install as install_hydra_entry
from distsim.provenance import mark, mark_from_hydra
from distsim.run_dir import exit_if_unwritable

register_schemas()


@hydra.main(version_base="1.3", config_path="../../conf", config_name="search")
def main(cfg: DictConfig) -> float | None:
    from hydra import compose

    from distsim.search.driver import check_scenarios, check_settings, run_search
    from distsim.search.evaluate import make_evaluator

    hc = HydraConfig.get()
    mark_from_hydra(cfg)  # the keys the user set: "set but not used" warns only of those
    base = [o for o in hc.overrides.task if not o.lstrip("+~").startswith(("search.", "seed=", "runner."))]
    from distsim.runner.session import connect, exit_now

    session = None
    try:
        check_settings(cfg)  # a bad setting is refused before Ray's start-up
        _say_start(cfg)
        check_scenarios(cfg, base, lambda ovs: mark(compose(config_name=hc.job.config_name, overrides=ovs), ovs))
        session = connect(cfg.runner.address, start_timeout_s=cfg.runner.start_timeout_s)  # one Ray for every generation's sweep
        result = run_search(
            cfg,
            hc.runtime.output_dir,
            base,
            evaluate=make_evaluator(cfg.runner, config_name=hc.job.config_name),
        )
    except UserError as err:
        print(f"distsim.search: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as err:  # finished generations and the best so far are on disk: a rerun resumes
        print(f"\ndistsim.search: {str(err) or 'interrupted'}", file=sys.stderr)
        if session is not None:  # in-flight jobs are not waited for: Ray's processes are killed, and we exit
            session, started = None, session
            started.abandon()
            exit_now(130)
        sys.exit(130)
    finally:
        if session is not None:
            session.shutdown()
    try:
        print(f"\nbest training score: {result.best_train_fitness:+.4f}  {' '.join(result.best_overrides)}")
        print(f"policy written to {result.policy_yaml}")
        sys.stdout.flush()
    except UserError as err:  # a full or closed stdout (distsim.command): the files are written
        print(f"distsim.search: {err}", file=sys.stderr)
        sys.exit(2)
    return result.best_train_fitness


def _say_start(cfg: DictConfig) -> None:
    """The first line, before the families' scenarios are checked and Ray starts (both take seconds, tens
    on a busy machine), so the search says at once what it is doing."""
    from distsim.search.families import holdout_families, train_families

    s = cfg.search
    print(f"search: checking the scenarios of {len(train_families(s))} training and {len(holdout_families(s))} held-out "
          "families, then starting Ray", flush=True)  # fmt: skip


if __name__ == "__main__":
    exit_if_unwritable("distsim.search", CONF_DIR / "search.yaml")  # before Hydra creates it, with a traceback
    install_hydra_entry("distsim.search")  # Hydra's compose and .hydra/ errors as one line, exit 2
    command.run("distsim.search", main)  # a full or closed stdout, and Ctrl-C, as one line
