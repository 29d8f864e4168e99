"""The search space of the multi-run fit: config keys with intervals, given as ``KEY=LOW:HIGH[:log]``.

Any config key that takes a number can be searched; each is mapped onto ``[0, 1]`` like
:class:`distsim.fidelity.fit.Param` (linearly, or on a log scale for one that spans decades). The
search starts from the value the config resolves to (the shipped defaults, or an override the user
gives for the key), so a fit reports how far it moved from what the simulator does today.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields

from omegaconf import OmegaConf

from distsim.config.compose import load_config
from distsim.errors import UserError
from distsim.fidelity.fit import Param
from distsim.instance.latency.roofline import RooflineCoefficients, coefficients_from

# The run-level coefficients (host and front end); the GPU-side ones are fitted on step-level data.
DEFAULT_PARAMS = (
    "cluster.latency.step_overhead_us=0:3000",
    "cluster.latency.sequence_overhead_us=0:200",
    "cluster.frontend.request_us=0:50000",
    "cluster.frontend.per_input_token_us=0:20",
    "cluster.frontend.per_output_token_us=0:200",
)
SPEC_FORM = "KEY=LOW:HIGH or KEY=LOW:HIGH:log"


def _bound(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise UserError(f"--params {spec!r}: {text!r} is not a finite number (expected {SPEC_FORM})")
    return value


def parse_param(spec: str) -> Param:
    """One ``KEY=LOW:HIGH[:log]``; the key is checked against the config later, all keys at once."""
    key, sep, box = spec.strip().partition("=")
    parts = box.split(":")
    if not sep or not key.strip() or len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
        raise UserError(f"--params {spec!r}: expected {SPEC_FORM}")
    low, high = _bound(parts[0], spec), _bound(parts[1], spec)
    log = len(parts) == 3
    if not low < high:
        raise UserError(f"--params {spec!r}: LOW must be below HIGH")
    if log and low <= 0:
        raise UserError(f"--params {spec!r}: a log scale needs LOW > 0")
    return Param(key.strip(), low, high, log)


def parse_params(specs: Sequence[str]) -> tuple[Param, ...]:
    """``--params`` values (each a comma-separated list of specs); :data:`DEFAULT_PARAMS` when none.
    Every key must be a config key that takes a number (one clear error naming it otherwise)."""
    items = [s for text in specs for s in text.split(",") if s.strip()] or list(DEFAULT_PARAMS)
    params = tuple(parse_param(s) for s in items)
    names = [p.name for p in params]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--params: {', '.join(twice)} given more than once")
    try:
        load_config([f"{p.name}={p.low!r}" for p in params])
    except UserError:
        for p in params:  # which one: Hydra's message names the key, but say it is the --params one
            try:
                load_config([f"{p.name}={p.low!r}"])
            except UserError as err:
                raise UserError(f"--params {p.name}: not a numeric config key ({err})") from None
        raise
    return params


def _default(cfg, key: str) -> float | None:
    """The value the simulator uses for ``key``: the config's, or the configured roofline kind's default
    where the config leaves a ``cluster.latency`` coefficient null."""
    from distsim.instance.latency import roofline3

    value = OmegaConf.select(cfg, key)
    prefix = "cluster.latency."
    three = cfg.cluster.latency.kind == "roofline3"
    names = {f.name for f in fields(roofline3.Roofline3Coefficients if three else RooflineCoefficients)}
    if value is None and key.startswith(prefix) and key[len(prefix) :] in names:
        own = roofline3.coefficients_from if three else coefficients_from
        value = getattr(own(cfg.cluster.latency), key[len(prefix) :])
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UserError(f"--params {key}: not a numeric config key (its value is {value!r})")
    return None if value is None else float(value)


def start_values(params: Sequence[Param], overrides: Sequence[str] = ()) -> dict[str, float]:
    """Where the search starts: each key's current value (defaults, then ``overrides``), within its box."""
    cfg = load_config(list(overrides))
    start = {}
    for p in params:
        value = _default(cfg, p.name)
        if value is None:
            raise UserError(
                f"--params {p.name}: the config has no value for it; give a start as {p.name}=VALUE"
            )
        start[p.name] = min(max(value, p.low), p.high)
    return start
