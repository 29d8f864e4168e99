"""The Hydra internals distsim replaces (distsim.hydra_entry.SEAMS) are still there, shaped as distsim calls
them: a Hydra release that moves or reshapes one fails here, naming it, before a user meets a traceback."""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import version

from distsim.hydra_entry import SEAMS

# each seam's parameters, as the wrapper passes them on (distsim/hydra_entry.py, distsim/config/compose.py)
PARAMETERS = {
    "Hydra.compose_config": ["self", "config_name", "overrides", "run_mode", "with_log_configuration", "from_shell",
                             "validate_sweep_overrides"],
    "_save_config": ["cfg", "filename", "output_dir"],
    "run_and_report": ["func"],
    "Hydra.get_mode": ["self", "config_name", "overrides"],
}


def test_pinned_to_the_hydra_it_was_written_for():
    assert version("hydra-core").startswith("1.3."), "a new Hydra: check each of distsim.hydra_entry.SEAMS"


def test_every_seam_exists_with_its_parameters():
    assert {attr for _, attr in SEAMS} == set(PARAMETERS)
    for module, attr in SEAMS:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        assert list(inspect.signature(obj).parameters) == PARAMETERS[attr], f"{module}.{attr} changed"
