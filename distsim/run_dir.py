"""Check the run directory a Hydra entry point is about to create, before Hydra creates it.

Why: Hydra makes ``hydra.run.dir`` and writes ``.hydra/`` before distsim's code runs, and reports an
OSError there (the path is a file, the disk is read-only) as a traceback. So ``python -m distsim`` and
``python -m distsim.search`` read the directory off the command line (or the primary config's default)
first and check it with :func:`distsim.outputs.check_dir`. Only the part before the first interpolation
(``outputs`` of ``outputs/${now:...}``) can be checked ahead; that is where such paths go wrong.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from distsim.errors import OutputError
from distsim.outputs import check_dir

KEY = "hydra.run.dir"


def _from_command_line(overrides: Sequence[str]) -> str | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    value = None
    for text in overrides:
        if text.lstrip("+~").startswith(KEY + "="):
            try:
                value = OverridesParser.create().parse_override(text).value()
            except Exception:  # Hydra's own grammar errors: Hydra reports them
                return None
    return None if value is None else str(value)


def _from_config(primary: Path) -> str | None:
    try:
        node = OmegaConf.to_container(OmegaConf.load(primary), resolve=False)
        return str(node["hydra"]["run"]["dir"])
    except (OSError, KeyError, TypeError):
        return None


def planned_run_dir(argv: Sequence[str], primary: Path) -> Path | None:
    """The fixed part of the directory Hydra will create for a single run with ``argv``; None when
    Hydra will not create one (multirun, --cfg, --help, ...) or it cannot be told ahead."""
    from hydra._internal.utils import get_args_parser

    try:
        args, _ = get_args_parser().parse_known_args(list(argv))
    except SystemExit:  # a malformed command line: Hydra reports it
        return None
    if args.multirun or args.cfg or args.help or args.hydra_help or args.info or args.shell_completion:
        return None
    value = _from_command_line(args.overrides)
    if value is None and not (args.config_name or args.config_path or args.config_dir):
        value = _from_config(primary)
    if not value:
        return None
    fixed = []
    for part in Path(value).parts:
        if "${" in part:
            break
        fixed.append(part)
    return Path(*fixed) if fixed else None


def exit_if_unwritable(prog: str, primary: Path, argv: Sequence[str] | None = None) -> None:
    """Print one line naming the directory and exit 2 if Hydra could not create the run directory."""
    planned = planned_run_dir(sys.argv[1:] if argv is None else argv, primary)
    if planned is None:
        return
    try:
        check_dir(planned)
    except OutputError as err:
        print(f"{prog}: {err} ({KEY})", file=sys.stderr)
        sys.exit(2)
