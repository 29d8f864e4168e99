"""``python -m distsim.validate RUN_DIR [overrides...] [--out DIR]``: replay a measured run and compare.

The same as ``python -m distsim.calibrate validate RUN_DIR``, the calibration pipeline's check stage.

Reads the run (vLLM bench folder or plain CSV run, see distsim.fidelity), simulates exactly its
requests on its engine settings, prints measured against simulated TTFT, TPOT and E2E (mean, p50, p90,
p95, p99) and writes validation.json ({metric: {measured, simulated, error_pct, interval, covered}}: the
simulated figure's 90% prediction interval, distsim.catalog.intervals) plus two PNGs
(per-request latency; running/waiting over time) into the run folder or ``--out``. Overrides are the
simulator's (e.g. ``cluster.latency.profile=rtx4090-llama-3.1-8b``) and win over the run's settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from distsim import outputs
from distsim.errors import UserError
from distsim.fidelity.table import format_comparison
from distsim.fidelity.validation import Validation, validate


def write_validation(v: Validation, out_dir: str | Path, plots: bool = True) -> list[Path]:
    """validation.json and (with ``plots``) validation_latency.png and validation_occupancy.png, each
    written atomically (distsim.outputs). Raises OutputError."""
    from distsim.fidelity.plots import latency_scatter, occupancy_plot

    out = outputs.prepare_dir(out_dir)
    path = outputs.write_text(out / "validation.json", json.dumps(v.to_json(), indent=2, allow_nan=False) + "\n")
    files = [path]
    if plots:
        files.append(latency_scatter(v.run, v.result.requests, out / "validation_latency.png"))
        files.append(occupancy_plot(v.run, v.result.requests, out / "validation_occupancy.png"))
    return files


def describe(v: Validation) -> str:
    """What was simulated, in one line."""
    lat = v.config.cluster.latency
    model = f"profile {lat.profile}" if lat.get("profile") else f"{lat.kind} latency"
    r = v.result.summary["requests"]
    eng = v.config.cluster.engine
    return (
        f"{v.run.name}: {len(v.run.requests)} requests on {v.config.cluster.hardware} ({v.config.cluster.model}), "
        f"{model}; engine data_parallel_size={eng.data_parallel_size} max_num_seqs={eng.max_num_seqs} max_num_batched_tokens={eng.max_num_batched_tokens} "
        f"total_kv_blocks={v.result.instances['total_kv_blocks'].iloc[0]}; simulated: {r['completed']} completed, "
        f"{r['dropped']} dropped, {int(v.result.requests['preemptions'].sum())} preemptions; "
        f"sent {_sent_as(v.run)}"
    )


def _sent_as(run) -> str:
    """How the replay sent the requests, as the run's reader says the client did."""
    if run.load_mode == "open":
        return "open loop (measured arrival times)"
    paced = f", paced at {run.request_rate_rps:g} req/s" if run.load_mode == "mixed" else ""
    return f"closed loop ({run.max_concurrency} clients{paced})"


def main(argv: Sequence[str] | None = None, prog: str = "python -m distsim.validate") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder (requests.jsonl + meta.json) or a CSV run")
    parser.add_argument(
        "overrides", nargs="*", help="simulator config overrides, e.g. cluster.latency.profile=NAME"
    )
    parser.add_argument("--out", help="folder for validation.json and the plots (default: the run folder)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNGs")
    args = parser.parse_args(argv)
    run_path = Path(args.run)
    out = Path(args.out) if args.out else (run_path if run_path.is_dir() else run_path.parent)
    try:
        if args.out:  # a bad --out fails before the replay (the run folder is checked once it is read)
            outputs.prepare_dir(out)
        v = validate(args.run, args.overrides)
        files = write_validation(v, out, plots=not args.no_plots)
    except UserError as err:
        print(f"distsim.validate: {err}", file=sys.stderr)
        return 2
    print(describe(v))
    print(format_comparison(v.comparison))
    print(v.interval_line())
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim.validate", main)  # a full or closed stdout, and Ctrl-C, as one line
