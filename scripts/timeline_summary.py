"""Summarise a run's timeline.json (``sim.timeline=true``) and check it against the run's own tables.

    python scripts/timeline_summary.py RUN_DIR

Per process (instance, runtime replica): slices, steps, busy time (the union of its step or batch slices)
against instances.parquet's busy_ms; then the requests' async slices and phases against requests.parquet,
and the flows and front decisions against summary.json. Exit status 1 when something disagrees. With a
timeline window (sim.timeline_start_s / sim.timeline_end_s) the timeline holds only what overlaps it, so
the whole run's figures are not compared. The output for the embedded default is in
scripts/results/timeline_summary.txt.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd


def union_us(spans: list[tuple[int, int]]) -> int:
    """The time covered by ``spans`` (a runtime replica's batches may overlap; an engine's steps do not)."""
    total, reach = 0, None
    for begin, end in sorted(spans):
        if reach is None or begin >= reach:
            total += end - begin
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    args = ap.parse_args()
    path = args.run_dir / "timeline.json"
    if not path.exists():
        print(f"timeline_summary: {path} not found (run with sim.timeline=true)", file=sys.stderr)
        return 2
    trace = json.loads(path.read_text())
    events, other = trace["traceEvents"], trace.get("otherData", {})
    start_us, stop_us = other.get("window_us", [0, None])
    windowed = start_us > 0 or stop_us is not None
    window = f"[{start_us / 1e6:g} s, {'end of run' if stop_us is None else f'{stop_us / 1e6:g} s'})"
    print(f"timeline.json: {len(events):,} events, {path.stat().st_size / 1e6:.2f} MB, window {window}, "
          f"run end {other.get('end_us', 0) / 1e6:.3f} s")
    print(f"  by kind: {', '.join(f'{ph} {n:,}' for ph, n in sorted(Counter(e['ph'] for e in events).items()))}")

    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    slices, steps, spans = Counter(), Counter(), defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e.get("cat") in ("step", "batch"):
            slices[e["pid"]] += 1
            steps[e["pid"]] += e["args"].get("steps", 1)
            spans[e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
    bad = 0
    instances = pd.read_parquet(args.run_dir / "instances.parquet") if (args.run_dir / "instances.parquet").exists() else None
    print()
    print(f"  {'pid':>4} {'process':<52} {'slices':>7} {'steps':>7} {'busy_ms':>12} {'parquet':>12}  agree")
    rows = {} if instances is None else {int(r.instance): r for r in instances.itertuples()}
    for pid in sorted(p for p in names if p - 1 in rows or p in slices):
        busy_ms = union_us(spans[pid]) / 1000.0
        row = rows.get(pid - 1)
        if row is None or windowed:
            parquet, agree = "", "-"
        else:
            parquet = f"{row.busy_ms:12.3f}"
            same = abs(busy_ms - row.busy_ms) < 5e-4 and (row.role == "runtime" or steps[pid] == row.steps)
            agree = "yes" if same else "DISAGREES"
            bad += not same
        print(f"  {pid:>4} {names[pid][:52]:<52} {slices[pid]:>7,} {steps[pid]:>7,} {busy_ms:>12.3f} {parquet:>12}  {agree}")
    if instances is not None and not windowed:
        print("busy time agrees with instances.parquet on every instance" if not bad
              else f"busy time DISAGREES with instances.parquet on {bad} instance(s)")

    reqs: dict[int, list[dict]] = defaultdict(list)
    instants = 0
    for e in events:
        if e.get("cat") == "request":
            if e["ph"] == "n":
                instants += 1
            else:
                reqs[e["id"]].append(e)
    phases = Counter(e["name"] for seq in reqs.values() for e in seq[1:-1] if e["ph"] == "b")
    print()
    print(f"requests: {len(reqs):,} async slices ({', '.join(f'{k} {v:,}' for k, v in sorted(phases.items()))}), "
          f"{instants:,} instants (never ran)")
    if (args.run_dir / "requests.parquet").exists() and not windowed:
        table = pd.read_parquet(args.run_dir / "requests.parquet")
        ended = 0
        for row in table.itertuples():
            seq = reqs.get(row.request_id)
            if seq and row.status == "completed" and seq[0]["ts"] == round(row.arrival_ms * 1000) \
                    and seq[-1]["ts"] == round(row.completion_ms * 1000):
                ended += 1
        completed = int((table["status"] == "completed").sum())
        same = len(reqs) + instants == len(table) and ended == completed
        bad += not same
        print(f"  requests.parquet: {len(table):,} rows, {completed:,} completed; slices from arrival to completion: "
              f"{ended:,} ({'agree' if same else 'DISAGREES'})")

    flows = Counter(e["cat"] for e in events if e.get("flow_out"))
    front = Counter(e["name"].split(" ")[0] for e in events if e["ph"] == "i")
    print()
    print(f"KV transfer flows: {flows['kv_transfer']:,}; hedge flows: {flows['hedge']:,}; "
          f"front decisions: {front['route']:,} routes, {front['spill']:,} spill-overs")
    summary_path = args.run_dir / "summary.json"
    if summary_path.exists() and not windowed:
        summary = json.loads(summary_path.read_text())
        checks = [("KV transfers", flows["kv_transfer"], summary.get("kv_transfer", {}).get("transfers", 0)),
                  ("hedge copies", flows["hedge"], summary.get("hedging", {}).get("copies_sent", 0)),
                  ("spill-overs", front["spill"], (summary.get("cells") or {}).get("spilled", 0))]
        bad += sum(seen != want for _, seen, want in checks)
        print("  summary.json: " + "; ".join(f"{what} {want:,} ({'agree' if seen == want else 'DISAGREES'})"
                                             for what, seen, want in checks))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
