"""Reference points and real regret, measured.

Reference: each built-in routing policy, the oracle (a clairvoyant greedy heuristic, distsim/policies/oracle.py)
and the per-request latency lower bound (distsim/regret/bound.py) on the same requests, for the default
scenario and the routing search's (conf/search_routing.yaml); each row against the best built-in and against the lower bound. Regret: fork-and-replay regret (distsim/regret) of sampled decisions of
round_robin, least_loaded and weighted with fresh and 250 ms stale signals, and of the oracle.

    python scripts/regret_bench.py reference [--requests N]
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
SCENARIOS = {"default": ("config", []), "search": ("search_routing", [])}


ORACLE_LABEL = "oracle (clairvoyant greedy heuristic)"


def reference(name: str, requests: int | None) -> None:
    config_name, base = SCENARIOS[name]
    if requests:
        base = [*base, f"workload.num_requests={requests}"]
    bound, rows = None, {}
    for policy in POLICIES:
        cfg = load_config([*base, f"policy={policy}"], config_name=config_name)
        result = run(resolve(cfg))
        if bound is None:
            bound = latency_bounds(resolve(cfg))
        figures = bound_summary(bound, result.requests)
        assert figures["ttft_ms"]["beat_their_bound"] == 0 and figures["e2e_ms"]["beat_their_bound"] == 0
        rows[policy] = figures
    t_floor, e_floor = figures["ttft_ms"]["bound"], figures["e2e_ms"]["bound"]
    builtins = [p for p in POLICIES if p != "oracle"]
    best_t = min(builtins, key=lambda p: rows[p]["ttft_ms"]["run"]["mean"])
    best_e = min(builtins, key=lambda p: rows[p]["e2e_ms"]["run"]["mean"])
    print(f"\n{name} scenario ({config_name}.yaml{', ' + ' '.join(base) if base else ''}), fresh signals; best built-in"
          f" by TTFT mean {best_t}, by E2E mean {best_e}; x bound: mean over the per-request lower bound's mean")
    print("| policy | TTFT mean | TTFT p99 | E2E mean | E2E p99 | TTFT mean vs best built-in | E2E mean vs best built-in"
          " | TTFT mean x bound | E2E mean x bound | (ms) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for policy, f in rows.items():
        t, e = f["ttft_ms"]["run"], f["e2e_ms"]["run"]
        vs_t = 100 * (t["mean"] / rows[best_t]["ttft_ms"]["run"]["mean"] - 1)
        vs_e = 100 * (e["mean"] / rows[best_e]["e2e_ms"]["run"]["mean"] - 1)
        label = ORACLE_LABEL if policy == "oracle" else policy
        print(f"| {label} | {t['mean']:,.1f} | {t['p99']:,.1f} | {e['mean']:,.1f} | {e['p99']:,.1f} | {vs_t:+.1f}% | "
              f"{vs_e:+.1f}% | {t['mean'] / t_floor['mean']:.2f} | {e['mean'] / e_floor['mean']:.2f} | "
              f"{f['requests']} completed |", flush=True)
    print(f"| per-request lower bound | {t_floor['mean']:,.1f} | {t_floor['p99']:,.1f} | {e_floor['mean']:,.1f} | "
          f"{e_floor['p99']:,.1f} | | | 1 | 1 | no policy can beat it |")


def regrets(requests: int, samples: int, horizon_s: float, pin: bool) -> None:
    base = [f"workload.num_requests={requests}"]
    settings = RegretSettings(samples, int(horizon_s * 1e6), pin)
    print(f"\nfork-and-replay regret, default scenario, {' '.join(base)}, regret.samples={samples} "
          f"regret.horizon_s={horizon_s:g} regret.pin_later={str(pin).lower()} "
          "(regret: chosen minus best candidate, ms; window: request-seconds)")
    print("| policy | signals | TTFT mean | regret mean | p90 | > 0 | E2E mean | regret mean | p90 | > 0 | "
          "window regret mean |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases = [(p, s) for p in ("round_robin", "least_loaded", "weighted") for s in ("fresh", "stale_250ms")]
    for policy, signals in [*cases, ("oracle", "fresh")]:  # the oracle: a clairvoyant greedy heuristic
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
    ap.add_argument("part", choices=("reference", "regret"))
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--horizon", type=float, default=20.0)
    ap.add_argument("--scenario", choices=tuple(SCENARIOS), action="append")
    ap.add_argument("--pin", action="store_true", help="regret.pin_later: later decisions as the run made them")
    args = ap.parse_args()
    if args.part == "reference":
        for name in args.scenario or SCENARIOS:
            reference(name, args.requests)
    else:
        regrets(args.requests or 600, args.samples, args.horizon, args.pin)


if __name__ == "__main__":
    main()
