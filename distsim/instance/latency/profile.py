"""Latency profiles: a calibrated latency model saved to a file that ``cluster.latency.profile`` loads.

A profile is JSON (or YAML) holding the model kind, its coefficients and where they come from:

    {
      "format": "distsim-latency-profile/1",
      "name": "rtx4090-llama-3.1-8b",
      "kind": "roofline",
      "coefficients": {"compute_efficiency": 0.88, "memory_efficiency": 0.97, "step_overhead_us": 1808},
      "fitted_on": {"model": "llama-3.1-8b", "hardware": "RTX4090", "tensor_parallel_size": 1},
      "provenance": {"runs": [...], "objective": ..., "errors_pct": {...}, "command": "..."}
    }

``cluster.latency.profile`` takes a shipped name (``distsim/catalog/data/profiles/NAME.json``) or a path.
Applying it sets ``cluster.latency.kind`` to the profile's kind and fills every coefficient the config
leaves null; a coefficient set explicitly in the config wins over the profile's. Roofline coefficients
are fractions of the GPU's peaks and may be tried on another GPU; linear coefficients are step times
of the GPU and model they were fitted on and mean nothing elsewhere (``fitted_on`` records which).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from distsim import inputs, outputs
from distsim.errors import ConfigError, InputFileError
from distsim.inputs import excerpt
from distsim.instance.latency.roofline3 import Roofline3Coefficients

FORMAT = "distsim-latency-profile/1"
COEFFICIENTS: dict[str, tuple[str, ...]] = {
    "linear": ("base_us", "per_prefill_token_us", "per_decode_token_us"),
    "roofline": (
        "compute_efficiency",
        "gemm_half_tokens",
        "attention_efficiency",
        "memory_efficiency",
        "layer_overhead_us",
        "sequence_overhead_us",
        "step_overhead_us",
    ),  # distsim.instance.latency.roofline.RooflineCoefficients (tests/test_fidelity_profile.py checks)
    "roofline3": tuple(f.name for f in fields(Roofline3Coefficients)),
}


@dataclass(frozen=True)
class LatencyProfile:
    name: str
    kind: str
    coefficients: dict[str, float]
    fitted_on: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "name": self.name,
            "kind": self.kind,
            "coefficients": self.coefficients,
            "fitted_on": self.fitted_on,
            "provenance": self.provenance,
        }
        return json.dumps(body, indent=2, allow_nan=False) + "\n"


def shipped_profiles() -> dict[str, Path]:
    """Shipped profile names (file stems, lower case) -> files."""
    folder = resources.files("distsim.catalog").joinpath("data", "profiles")
    out = {}
    if folder.is_dir():
        for item in folder.iterdir():
            if item.name.endswith((".json", ".yaml", ".yml")):
                out[item.name.rsplit(".", 1)[0].lower()] = Path(str(item))
    return out


def _parse(data: Any, path: Path) -> LatencyProfile:
    if not isinstance(data, dict):
        raise InputFileError(path, "a latency profile must be an object")
    kind = data.get("kind")
    if kind not in COEFFICIENTS:
        raise InputFileError(path, f"kind must be one of {', '.join(COEFFICIENTS)} (got {excerpt(kind)})")
    coefs = data.get("coefficients")
    if not isinstance(coefs, dict):
        raise InputFileError(path, "missing 'coefficients' object")
    unknown = set(coefs) - set(COEFFICIENTS[kind])
    if unknown:
        raise InputFileError(
            path,
            f"unknown {kind} coefficient {excerpt(sorted(unknown)[0])}; known: {', '.join(COEFFICIENTS[kind])}",
        )
    for name, value in coefs.items():
        bad = isinstance(value, bool) or not isinstance(value, (int, float))
        if bad or not math.isfinite(value) or value < 0:
            raise InputFileError(
                path, f"coefficient {name!r} must be a finite number >= 0 (got {excerpt(value)})"
            )
    for section in ("fitted_on", "provenance"):
        if not isinstance(data.get(section) or {}, dict):
            raise InputFileError(path, f"{section!r} must be an object (got {excerpt(data[section])})")
    return LatencyProfile(
        name=str(data.get("name") or path.stem),
        kind=kind,
        coefficients={k: float(v) for k, v in coefs.items()},
        fitted_on=dict(data.get("fitted_on") or {}),
        provenance=dict(data.get("provenance") or {}),
    )


def read_profile(path: str | Path) -> LatencyProfile:
    """A profile file (JSON, or YAML by extension)."""
    path = Path(path)
    data = (
        inputs.read_yaml(path)
        if path.suffix.lower() in (".yaml", ".yml")
        else inputs.read_json(path, what=None)
    )
    return _parse(data, path)


def write_profile(profile: LatencyProfile, path: str | Path) -> Path:
    """Write the profile atomically (distsim.outputs); raises OutputError naming the path."""
    return outputs.write_text(outputs.prepare_file(path), profile.to_json())


def load_profile(name_or_path: str, key: str = "cluster.latency.profile") -> LatencyProfile:
    """A shipped profile by name (case-insensitive) or a profile file by path."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_file():
        return read_profile(path)
    shipped = shipped_profiles()
    found = shipped.get(text.lower()) or shipped.get(path.stem.lower() if path.suffix else "")
    if found is None:
        known = ", ".join(sorted(shipped)) or "none"
        raise ConfigError(
            key, f"unknown latency profile {text!r}: not a file, nor a shipped profile ({known})"
        )
    return read_profile(found)


def apply_profile(cfg: Any, key: str = "cluster.latency") -> Any:
    """``cfg`` (a ``cluster.latency`` node) with its profile applied; unchanged when it names none."""
    name = cfg.get("profile") if cfg is not None else None
    if not name:
        return cfg
    profile = load_profile(name, f"{key}.profile")
    values = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    values["kind"] = profile.kind
    for coef, value in profile.coefficients.items():
        if values.get(coef) is None:
            values[coef] = value
    return OmegaConf.create(values)
