"""One default per setting: the config schema (distsim/config/schema.py and the nodes it composes) holds
each setting's default. The checked settings the code builds from it either have no default or the
schema's, so a test or script that builds them directly cannot run with another value by accident (the
engine's ``async_scheduling`` once defaulted to true in the schema and to false in the engine)."""

from __future__ import annotations

import dataclasses

import pytest

from distsim.cells.settings import CellSettings
from distsim.cluster.settings import FrontendSettings, HedgeSettings, TransferSettings
from distsim.config.schema import (
    CellsConfig,
    EngineConfig,
    FitnessConfig,
    FrontendConfig,
    HedgeConfig,
    KVTransferConfig,
)
from distsim.instance.instance import EngineParams
from distsim.metrics.settings import FitnessSettings
from distsim.workload.schema import SLOConfig
from distsim.workload.settings import SloDefaults

# (schema node, settings the code builds from it, {schema key: (settings field, factor to its unit)})
PAIRS = [
    (EngineConfig, EngineParams, {"prefill_batch_window_ms": ("prefill_batch_window_us", 1000)}),
    (FrontendConfig, FrontendSettings, {}),
    (SLOConfig, SloDefaults, {}),
    (HedgeConfig, HedgeSettings, {"delay_slo_fraction": ("slo_fraction", 1), "delay_ms": ("delay_us", 1000)}),
    (KVTransferConfig, TransferSettings, {"bandwidth_gbps": ("bandwidth_bytes_per_s", 1e9)}),
    (
        CellsConfig,
        CellSettings,
        {f"summary_{k}_ms": (f"summary_{k}_us", 1000) for k in ("interval", "jitter", "delay")},
    ),
    (FitnessConfig, FitnessSettings, {}),
]


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def disagreements(schema: type, settings: type, renamed: dict) -> list[str]:
    """Fields of ``settings`` whose default differs from the schema's default of the same setting."""
    mine = {f.name: f for f in dataclasses.fields(settings)}
    out = []
    for f in dataclasses.fields(schema):
        name, factor = renamed.get(f.name, (f.name, 1))
        if name not in mine:
            continue
        code, want = _default(mine[name]), _default(f)
        if code is dataclasses.MISSING:
            continue  # no default: the schema's is the only one
        if code is None and dataclasses.is_dataclass(want):
            continue  # a nested section, built into its own settings object where it is on (None: off)
        if isinstance(want, (int, float)) and not isinstance(want, bool) and want is not None:
            want = want * factor
        if code != want:
            out.append(
                f"{settings.__name__}.{name} = {code!r}, schema {schema.__name__}.{f.name} = {_default(f)!r}"
            )
    return out


@pytest.mark.parametrize("schema, settings, renamed", PAIRS, ids=[s.__name__ for _, s, _ in PAIRS])
def test_settings_take_the_schemas_default_or_none(schema, settings, renamed):
    assert disagreements(schema, settings, renamed) == []


def test_the_check_finds_a_second_default():
    @dataclasses.dataclass(frozen=True)
    class Engine:
        async_scheduling: bool = False
        max_num_seqs: int = 256  # the same as the schema's: allowed

    assert disagreements(EngineConfig, Engine, {}) == [
        "Engine.async_scheduling = False, schema EngineConfig.async_scheduling = True"
    ]
