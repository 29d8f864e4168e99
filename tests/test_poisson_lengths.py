"""``dist: poisson`` for token lengths (InferMesh's output lengths): mean and variance both ``mean``."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.events.rng import stream
from distsim.workload.lengths import Sampler
from distsim.workload.schema import DistConfig


def sampler(**fields) -> Sampler:
    return Sampler(OmegaConf.structured(DistConfig(dist="poisson", **fields)), "workload.output_tokens")


@pytest.mark.parametrize("mean", [3.0, 128.0, 2000.0])
def test_draws_have_the_poisson_mean_and_variance(mean):
    x = sampler(mean=mean).sample(stream(0, "test"), 200_000)
    assert x.dtype == np.int64 and x.min() >= 1
    se = np.sqrt(mean / x.size)  # the sample mean's standard error
    assert abs(x.mean() - mean) < 5 * se + (np.exp(-mean) if mean < 10 else 0)  # a draw of 0 is lifted to 1
    if mean > 10:
        assert x.var() == pytest.approx(mean, rel=0.03)


def test_min_and_max_clamp_the_draws():
    x = sampler(mean=100.0, min=90, max=110).sample(stream(1, "test"), 10_000)
    assert x.min() == 90 and x.max() == 110


@pytest.mark.parametrize(("mean", "needle"), [(None, "required"), (0, "> 0"), (-4, "> 0"), (1e13, "at most")])
def test_a_bad_mean_names_its_key(mean, needle):
    with pytest.raises(ConfigError) as err:
        sampler(mean=mean)
    assert err.value.key == "workload.output_tokens.mean" and needle in err.value.message


def test_a_run_with_poisson_output_lengths():
    cfg = load_config(["workload=fixed", "workload.num_requests=100", "workload.output_tokens={dist: poisson, mean: 64}"])
    out = simulate(cfg).requests["output_tokens"]
    assert out.nunique() > 10 and abs(out.mean() - 64) < 5 * np.sqrt(64 / 100)
