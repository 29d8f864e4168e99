"""Model and hardware catalogs: HF config.json architectures and GPU specs, each number sourced."""

from distsim.catalog.hardware import HARDWARE_NAMES, HardwareSpec, load_hardware
from distsim.catalog.models import MODEL_NAMES, ModelSpec, load_model

__all__ = ["HARDWARE_NAMES", "MODEL_NAMES", "HardwareSpec", "ModelSpec", "load_hardware", "load_model"]
