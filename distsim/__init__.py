"""distsim: a deterministic discrete-event simulator of LLM inference serving clusters."""

from distsim.config.compose import load_config
from distsim.simulate import SimulationResult, simulate

__all__ = ["SimulationResult", "load_config", "simulate"]
__version__ = "0.1.0"
