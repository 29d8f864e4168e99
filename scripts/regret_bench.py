"""Headroom and real regret, measured.

Headroom: each built-in routing policy, the clairvoyant oracle (distsim/policies/oracle.py) and the
per-request latency lower bound (distsim/regret/bound.py) on the same requests, for the default scenario and
the search's (conf/search.yaml). Regret: fork-and-replay regret (distsim/regret) of sampled decisions of
round_robin, least_loaded and weighted with fresh and 250 ms stale signals, and of the oracle.

    python scripts/regret_bench.py headroom [--requests N]
    python scripts/regret_bench.py regret [--requests N] [--samples K] [--horizon S] [--pin]
"""

from __future__ import annotations

import argparse

from distsim import load_config
from distsim.config.regret import RegretSettings
from distsim.errors import print_warnings_as_lines
from distsim.regret.bound import bound_summary, latency_bounds
from distsim.regret.run import regret, summary
from distsim.resolve import resolve
from distsim.simulate import run

POLICIES = ("round_robin", "random", "least_loaded", "least_kv", "power_of_two", "prefix_affinity", "weighted", "oracle")
SCENARIOS = {"default": ("config", []), "search": ("search", [])}


def headroom(name: str, requests: int | None) -> None:
    config_name, base = SCENARIOS[name]
    if requests:
        base = [*base, f"workload.num_requests={requests}"]
    bound = None
    print(f"\n{name} scenario ({config_name}.yaml{', ' + ' '.join(base) if base else ''}), fresh signals")
    print("| policy | TTFT mean | TTFT p99 | E2E mean | E2E p99 | (ms) |\n|---|---:|---:|---:|---:|---|")
    for policy in POLICIES:
        cfg = load_config([*base, f"policy={policy}"], config_name=config_name)
        scenario = resolve(cfg)
        result = run(scenario)
        if bound is None:
            bound = latency_bounds(resolve(cfg))
        figures = bound_summary(bound, result.requests)
        t, e = figures["ttft_ms"], figures["e2e_ms"]
        assert t["beat_their_bound"] == 0 and e["beat_their_bound"] == 0
        print(f"| {policy} | {t['run']['mean']:,.1f} | {t['run']['p99']:,.1f} | {e['run']['mean']:,.1f} | "
              f"{e['run']['p99']:,.1f} | {figures['requests']} completed |", flush=True)
    print(f"| lower bound | {t['bound']['mean']:,.1f} | {t['bound']['p99']:,.1f} | {e['bound']['mean']:,.1f} | "
          f"{e['bound']['p99']:,.1f} | no policy can beat it |")


def regrets(requests: int, samples: int, horizon_s: float, pin: bool) -> None:
    base = [f"workload.num_requests={requests}"]
    settings = RegretSettings(samples, int(horizon_s * 1e6), pin)
    print(f"\nfork-and-replay regret, default scenario, {' '.join(base)}, regret.samples={samples} "
          f"regret.horizon_s={horizon_s:g} regret.pin_later={str(pin).lower()} "
          "(regret: chosen minus best candidate, ms; window: request-seconds)")
    print("| policy | signals | TTFT mean | regret mean | p90 | > 0 | E2E mean | regret mean | p90 | > 0 | "
          "window regret mean |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases = [(p, s) for p in ("round_robin", "least_loaded", "weighted") for s in ("fresh", "stale_250ms")]
    for policy, signals in [*cases, ("oracle", "fresh")]:
        cfg = load_config([*base, f"policy={policy}", f"signals={signals}"])
        result = run(resolve(cfg))
        f = summary(regret(resolve(cfg), result.requests, settings), settings)
        t, e, w = f["ttft_ms"], f["e2e_ms"], f["window_s"]
        print(f"| {policy} | {signals} | {result.summary['ttft_ms']['mean']:,.1f} | {t['regret_mean']:,.1f} | "
              f"{t['regret_p90']:,.1f} | {100 * t['share_positive']:.0f}% | {result.summary['e2e_ms']['mean']:,.0f} | "
              f"{e['regret_mean']:,.1f} | {e['regret_p90']:,.1f} | {100 * e['share_positive']:.0f}% | "
              f"{w['regret_mean']:,.2f} |", flush=True)


def main() -> None:
    print_warnings_as_lines()  # the search scenario's max_model_len warning: one line on stderr
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=("headroom", "regret"))
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--horizon", type=float, default=20.0)
    ap.add_argument("--scenario", choices=tuple(SCENARIOS), action="append")
    ap.add_argument("--pin", action="store_true", help="regret.pin_later: later decisions as the run made them")
    args = ap.parse_args()
    if args.part == "headroom":
        for name in args.scenario or SCENARIOS:
            headroom(name, args.requests)
    else:
        regrets(args.requests or 600, args.samples, args.horizon, args.pin)


if __name__ == "__main__":
    main()
