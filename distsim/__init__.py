"""distsim: a deterministic discrete-event simulator of LLM inference serving clusters."""

import contextlib
import sys

from distsim.command import starting

# Under ``python -m distsim...`` this package is imported while sys.argv[0] is still "-m" (the runpy
# docs): Ctrl-C during the simulation stack's imports is then the command's one line and status 130.
with starting("distsim") if sys.argv[:1] == ["-m"] else contextlib.nullcontext():
    from distsim.config.compose import load_config
    from distsim.simulate import SimulationResult, simulate

__all__ = ["SimulationResult", "load_config", "simulate"]
__version__ = "0.1.0"
