"""A fake evaluator for search-loop tests: fitness from each config's text alone (deterministic), as the
runner's results table, recording each call and its configs."""

from __future__ import annotations

import zlib

import pandas as pd


def fake_evaluate(calls: list):
    seen: dict[str, list[str]] = {}

    def evaluate(configs, seeds, sweep_dir):
        calls.append((sweep_dir.name, len(configs), list(seeds)))
        rows = []
        seen[sweep_dir.name] = [" ".join(c) for c in configs]
        for c in configs:
            text = " ".join(c)
            for seed in seeds:
                f = 0.5 + (zlib.crc32(f"{text} {seed}".encode()) % 1000) / 10_000
                rows.append({"config": text, "seed": seed, "status": "ok", "fitness": f, "policy": "x"})
        return pd.DataFrame(rows)

    evaluate.configs = seen
    return evaluate
