"""A model folder's own generation_config.json picks the sampling path (vLLM's --generation-config auto
applies its defaults to requests that set none), ahead of the catalog's table; a folder without one keeps
the table's path (or vLLM's temperature 1); a value that is not a number is one line naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from distsim.catalog import load_hardware, load_model
from distsim.errors import InputFileError
from distsim.fidelity.steps.compare import latency_settings
from distsim.instance.latency.roofline3 import SAMPLER_TERMS
from distsim.instance.latency.serving import SAMPLERS, sampler_path

TINY = Path(__file__).resolve().parent / "fixtures" / "profile" / "tiny-llama.json"


def folder(tmp_path: Path, generation: dict | None) -> Path:
    shutil.copy(TINY, tmp_path / "config.json")
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


@pytest.mark.parametrize(
    ("generation", "path"),
    [
        ({"temperature": 0.0}, "greedy"),
        ({"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}, "top_k_top_p"),
        ({"temperature": 0.8}, "temperature"),
        ({"bos_token_id": 1, "eos_token_id": 2}, "temperature"),  # token ids only: vLLM's defaults
        (None, "temperature"),
    ],
)
def test_the_folders_generation_config_picks_the_sampling_path(tmp_path, generation, path):
    model = load_model(str(folder(tmp_path, generation)))
    assert sampler_path("auto", model.name, dict(model.generation_defaults)) == path
    lm = latency_settings(()).build(model, {}, load_hardware("H100"), 1)
    terms = dict(zip(SAMPLER_TERMS, SAMPLERS[path]))
    assert lm.coefficients.sampler_call_us == terms["sampler_call_us"]  # the path's measured terms priced
    assert sampler_path("greedy", model.name, dict(model.generation_defaults)) == "greedy"  # the config wins


def test_a_catalog_model_keeps_its_tables_path():
    assert load_model("qwen2.5-7b").generation_defaults == ()
    assert sampler_path("auto", "qwen2.5-7b", {}) == "top_k_top_p"


def test_a_value_that_is_not_a_number_names_the_file(tmp_path):
    with pytest.raises(InputFileError, match="generation_config.json.*'temperature' must be a number"):
        load_model(str(folder(tmp_path, {"temperature": "hot"})))
