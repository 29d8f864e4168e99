"""What distsim's Hydra entry points (``python -m distsim``, ``python -m distsim.search``) change in Hydra's
own steps, so that a user's mistake there reads as one line with exit status 2, as it does everywhere else.

Why: Hydra composes the config and writes ``.hydra/`` before distsim's code runs, and reports what goes
wrong there its own way: several lines and exit 1 for a type error or an unknown key, a traceback for an
OSError while writing ``.hydra/config.yaml`` (a full disk). :func:`install` wraps three of Hydra's
functions, in this process only:

- ``Hydra.compose_config`` raises :func:`distsim.config.compose.composition_error` (a ConfigError naming the
  key and the rule, as ``load_config`` does) instead of Hydra's composition errors, and refuses a key added
  with ``+`` where the schema is closed (distsim.config.known_keys);
- ``hydra.core.utils._save_config`` raises an :class:`~distsim.errors.OutputError` naming the file it could
  not write;
- ``run_and_report``, which reports whatever escapes Hydra's run, prints a UserError as
  ``PROG: MESSAGE`` and exits 2 (anything else goes on to Hydra's own report).

``HYDRA_FULL_ERROR=1`` keeps Hydra's own reports of composition errors, with their stack.

Hydra 1.3 offers no hook for these steps (its callbacks run after the config is composed and saved, and
none sees how an error is reported), so :func:`install` is the one function that replaces Hydra's internals
(with distsim.config.compose.skip_hydra_mode_compose, which spares a compose): :data:`SEAMS` names each,
and tests/test_hydra_seams.py checks them against the Hydra version installed (``hydra-core>=1.3,<1.4``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from distsim.errors import OutputError, UserError, os_reason


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


P = ParamSpec("P")
R = TypeVar("R")
SaveConfig = Callable[[object, str, Path], None]  # hydra.core.utils._save_config(cfg, filename, output_dir)
Task = Callable[[], object]  # what hydra's run_and_report runs


def _compose_reporting_the_key(original: Callable[P, R]) -> Callable[P, R]:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from distsim.config.compose import composition_error
    from distsim.config.known_keys import check_known_keys

    @functools.wraps(original)  # its signature stays Hydra's (tests/test_hydra_seams.py)
    def compose_config(*args: P.args, **kwargs: P.kwargs) -> R:  # a method: the Hydra object comes first
        try:
            cfg = original(*args, **kwargs)
        except (HydraException, OmegaConfBaseException) as err:
            if _full_error():
                raise
            raise composition_error(err) from None
        check_known_keys(cfg)  # type: ignore[arg-type]  # a key added with + where the schema is closed
        return cfg

    return compose_config


def _save_naming_the_file(original: SaveConfig) -> SaveConfig:
    @functools.wraps(original)
    def save_config(cfg: object, filename: str, output_dir: Path) -> None:
        try:
            original(cfg, filename, output_dir)
        except OSError as err:  # the directory could not be made, or the file written (a full disk)
            folder = Path(output_dir).absolute()
            if not folder.is_dir():
                raise OutputError(str(folder), f"cannot be created ({os_reason(err)})") from None
            raise OutputError(str(folder / filename), f"could not be written ({os_reason(err)})") from None

    return save_config


def _report_user_errors(original: Callable[[Task], object], prog: str) -> Callable[[Task], object]:
    @functools.wraps(original)
    def run_and_report(func: Task) -> object:
        def guarded() -> object:
            try:
                return func()
            except UserError as err:
                print(f"{prog}: {err}", file=sys.stderr)
                sys.exit(2)

        return original(guarded)

    return run_and_report


# (module, attribute) of each Hydra internal that distsim replaces, in this process only
SEAMS = (
    ("hydra._internal.hydra", "Hydra.compose_config"),  # install: a composition error as one ConfigError
    ("hydra.core.utils", "_save_config"),  # install: .hydra/ not written as one OutputError
    ("hydra._internal.utils", "run_and_report"),  # install: a UserError as one line, exit 2
    ("hydra._internal.hydra", "Hydra.get_mode"),  # distsim.config.compose.skip_hydra_mode_compose
)


def install(prog: str) -> None:
    """Wrap Hydra's compose, record and report steps for the entry point ``prog`` (once per process)."""
    import hydra._internal.utils as hydra_utils
    import hydra.core.utils as core_utils
    from hydra._internal.hydra import Hydra

    if getattr(hydra_utils.run_and_report, "_distsim", False):
        return
    Hydra.compose_config = _compose_reporting_the_key(Hydra.compose_config)  # type: ignore[method-assign]
    core_utils._save_config = _save_naming_the_file(core_utils._save_config)
    report = _report_user_errors(hydra_utils.run_and_report, prog)
    report._distsim = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = report
