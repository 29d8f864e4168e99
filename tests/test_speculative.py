"""Speculative decoding (cluster.engine.speculative): INV-31 (at most k + 1 tokens per sequence per step,
never past the output length), the tokens per step against the acceptance model, KV conservation with the
drafts' slots, determinism, and bad values as one line naming the key."""

from __future__ import annotations

import math

import numpy as np
import pytest
from clikit import assert_user_error, run_module
from simkit import engine, run

from distsim import load_config, simulate
from distsim.errors import ConfigError
from distsim.instance.latency.serving import capture_sizes
from distsim.instance.speculative.acceptance import Acceptance
from distsim.instance.speculative.decoders import SpeculativeDecoders
from distsim.instance.speculative.draft import DraftCost
from distsim.instance.speculative.settings import SpeculativeSettings
from distsim.request import Request, Status


def spec(k: int = 3, rate: float = 0.7, pass_us: float = 20.0, profile: tuple[float, ...] | None = None):
    profile = profile or (rate,) * k
    return SpeculativeSettings("eagle", len(profile), Acceptance(profile), DraftCost(None, pass_us, "test"))


def requests(n: int, seed: int = 1, gap_us: float = 300.0, prompt=(4, 40), output=(1, 60)) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(gap_us, n)).astype(np.int64)
    return [Request(i, int(t[i]), int(rng.integers(*prompt)), int(rng.integers(*output))) for i in range(n)]


class TokenClock:
    """After each event: the invariants (docs/invariants.md), and each decoder's tokens since the engine's last
    step (steps are never fast-forwarded under speculation, so one event ends at most one step of an engine)."""

    def __init__(self, k: int):
        self.k = k
        self.seen: dict[int, tuple[int, int]] = {}  # request -> (step index, generated)
        self.most = 0

    def __call__(self, sim, now: int) -> None:
        sim.cluster.check_invariants()
        sim.checks += 1
        for inst in sim.cluster.instances:
            for req in inst.running.values():
                before = self.seen.get(req.request_id)
                if before is not None and inst.step_index == before[0] + 1:
                    gained = req.generated - before[1]
                    assert gained <= self.k + 1, f"request {req.request_id}: {gained} tokens in one step"
                    self.most = max(self.most, gained)
                self.seen[req.request_id] = (inst.step_index, req.generated)


def test_a_step_gives_a_sequence_at_most_k_plus_one_tokens_and_never_past_its_output():
    clock = TokenClock(3)
    reqs = requests(60)
    sim = run(reqs, engine(speculative=spec(3, 0.9)), after_event=clock)
    assert sim.checks > 0 and clock.most == 4  # k + 1 reached, never passed
    assert all(r.status == Status.COMPLETED and r.generated == r.output_tokens for r in reqs)
    inst = sim.cluster.instances[0]
    assert inst.kv.available() == inst.kv.total  # every block back (free or evictable in the prefix cache)


def test_blocks_run_short_preempting_and_every_block_comes_back():
    reqs = requests(40, seed=3, gap_us=50.0, output=(20, 80))
    sim = run(reqs, engine(speculative=spec(4, 0.8), total_kv_blocks=40), check_every_event=True)
    inst = sim.cluster.instances[0]
    assert inst.stats.preemptions > 0  # the drafts' slots pushed the cache to preemption
    assert all(r.status == Status.COMPLETED and r.generated == r.output_tokens for r in reqs)
    assert inst.kv.available() == inst.kv.total


@pytest.mark.parametrize("profile", [(0.6, 0.6, 0.6, 0.6), (0.9, 0.7, 0.5, 0.3)])
def test_the_mean_tokens_per_step_matches_the_acceptance_model(profile, monkeypatch):
    """Over the steps that drafted all k tokens, the mean tokens out is E = 1 + p1 + p1 p2 + ... (for an i.i.d.
    rate a: (1 - a^(k+1)) / (1 - a)), within 4 standard errors."""
    k = len(profile)
    acceptance = Acceptance(profile)
    if len(set(profile)) == 1:
        a = profile[0]
        assert math.isclose(acceptance.expected_tokens(), (1 - a ** (k + 1)) / (1 - a))
    full: list[int] = []
    advance = SpeculativeDecoders.advance

    def recording(self, kv, step):
        drafts = [d for _, d in self.planned]
        before = [r.generated for r, _ in self.planned]
        reqs = [r for r, _ in self.planned]
        out = advance(self, kv, step)
        full.extend(r.generated - g for r, g, d in zip(reqs, before, drafts) if d == k)
        return out

    monkeypatch.setattr(SpeculativeDecoders, "advance", recording)
    run(requests(80, seed=5, gap_us=2000.0, output=(200, 400)), engine(
        speculative=spec(profile=profile), max_num_batched_tokens=256, total_kv_blocks=4096))
    tokens = np.asarray(full)
    assert tokens.size > 5000 and tokens.max() <= k + 1 and tokens.min() >= 1
    stderr = tokens.std(ddof=1) / math.sqrt(tokens.size)
    assert abs(tokens.mean() - acceptance.expected_tokens()) < 4 * stderr, (tokens.mean(), acceptance.expected_tokens())


def test_the_same_seed_gives_the_same_run_and_another_seed_another_draw():
    def completions(seed: int) -> list[int]:
        reqs = requests(30, seed=2)
        run(reqs, engine(speculative=spec()), seed=seed)
        return [r.completion_us for r in reqs]

    assert completions(0) == completions(0)
    assert completions(0) != completions(1)


def test_speculation_shortens_decoding_at_light_load_under_the_step_model():
    """One request at a time: the target's weight reads dominate a step, so verifying k drafts costs little
    more than one token and the time per output token falls (the guide's low-load end)."""
    base = ["workload.num_requests=6", "workload.arrival.rate_rps=0.5", "cluster.instances=1"]
    off = simulate(load_config(base)).summary["tpot_ms"]["mean"]
    on = simulate(load_config([*base, "cluster.engine.speculative.method=eagle"])).summary["tpot_ms"]["mean"]
    assert on < 0.6 * off, (on, off)


def test_capture_sizes_are_rounded_to_multiples_of_k_plus_one():
    sizes = capture_sizes(256, 2048, 3)
    assert sizes[0] == 4 and all(s % 4 == 0 for s in sizes) and sizes[-1] == 512
    assert capture_sizes(256, 2048) == capture_sizes(256, 2048, 0)


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["method=medusa"], "speculative.method", "none, draft_model, eagle, mtp, ngram"),
        (["method=eagle", "num_speculative_tokens=0"], "speculative.num_speculative_tokens", "from 1 to"),
        (["method=eagle", "acceptance_rate=1.5"], "speculative.acceptance_rate", "[0, 1]"),
        (["method=eagle", "acceptance_profile=[0.5,-0.1,0.5]"], "speculative.acceptance_profile[1]", "[0, 1]"),
        (["method=eagle", "acceptance_profile=[0.5]"], "speculative.acceptance_profile", "one rate per drafted position"),
        (["method=ngram"], "speculative.acceptance_rate", "no published default"),
        (["method=draft_model", "acceptance_rate=0.7", "draft_model=llama-0b"], "speculative.draft_model", "unknown model"),
        (["method=draft_model", "acceptance_rate=0.7"], "speculative.draft_model", "needs a catalog model"),
        (["method=eagle", "head_cost_us=-1"], "speculative.head_cost_us", ">= 0"),
    ],
)
def test_a_bad_speculative_value_is_one_line_naming_the_key(overrides, key, words):
    cfg = load_config(["workload.num_requests=5", *(f"cluster.engine.speculative.{o}" for o in overrides)])
    with pytest.raises(ConfigError) as err:
        simulate(cfg)
    assert f"cluster.engine.{key}" in str(err.value) and words in str(err.value), str(err.value)


def test_a_bad_speculative_value_exits_2_on_the_command_line():
    proc = run_module("distsim", "workload.num_requests=5", "cluster.engine.speculative.method=eagle",
                      "cluster.engine.speculative.acceptance_rate=2")
    assert_user_error(proc, 2, "cluster.engine.speculative.acceptance_rate")


def test_a_cancelled_hedge_copy_frees_its_drafts_slots():
    """Hedging cancels the losing copy, decoding or not (leave_running): the speculating engine's blocks,
    drafts' slots included, all come back, with the invariants checked after every event."""
    from omegaconf import OmegaConf

    from distsim.cluster import settings as cluster_settings
    from distsim.config.schema import PolicyConfig

    node = OmegaConf.structured(PolicyConfig)
    node.hedge.delay_ms = 0.2
    reqs = requests(40, seed=4, gap_us=100.0, output=(20, 60))
    sim = run(reqs, engine(speculative=spec(3, 0.8)), instances=2, check_every_event=True,
              policy_cfg=cluster_settings.policy(node))
    assert sim.checks > 0 and sim.cluster.hedger.cancelled > 0
    for inst in sim.cluster.instances:
        assert inst.kv.available() == inst.kv.total and not inst.running
