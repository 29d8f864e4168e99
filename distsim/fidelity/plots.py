"""The validation plots (PNG): measured against simulated latency per request, and the number of
running and waiting requests over time."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from distsim import outputs  # noqa: E402
from distsim.fidelity.occupancy import occupancy  # noqa: E402
from distsim.fidelity.run import MeasuredRun  # noqa: E402

_PANELS = (("ttft_ms", "TTFT (s)", 1e-3), ("tpot_ms", "TPOT (ms)", 1.0), ("e2e_ms", "E2E (s)", 1e-3))


def latency_scatter(run: MeasuredRun, simulated: pd.DataFrame, path: Path, title: str = "") -> Path:
    """One panel per latency: each request's measured value against its simulated one."""
    sim = simulated.set_index("request_id")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (col, label, scale) in zip(axes, _PANELS):
        m = run.requests[col].to_numpy() * scale
        s = sim[col].reindex(run.requests["request_id"]).to_numpy() * scale
        ok = ~(np.isnan(m) | np.isnan(s))
        ax.scatter(m[ok], s[ok], s=9, alpha=0.6)
        if ok.any():
            lo, hi = float(min(m[ok].min(), s[ok].min())), float(max(m[ok].max(), s[ok].max()))
            ax.plot([lo, hi], [lo, hi], color="grey", linewidth=1, linestyle="--")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
        ax.set_title(label.split(" ")[0])
    fig.suptitle(title or f"{run.name}: per-request latency, measured vs simulated")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def occupancy_plot(run: MeasuredRun, simulated: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Running and waiting requests over time: the engine's series, the measured request table's
    and the simulation's."""
    req = run.requests
    end = float(np.nanmax([np.nanmax(req["completion_ms"]), np.nanmax(simulated["completion_ms"])]))
    t = np.linspace(0.0, end, 600)
    sim_sched = simulated["arrival_ms"] + simulated["queue_ms"]
    s_run, s_wait = occupancy(simulated["arrival_ms"], sim_sched, simulated["completion_ms"], t)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharex=True)
    for ax, series, name in ((axes[0], s_run, "running"), (axes[1], s_wait, "waiting")):
        if run.timeseries is not None:
            ts = run.timeseries
            ax.plot(ts["t_s"], ts[name], label="measured (engine, per second)", color="black", linewidth=1.2)
        if req["scheduled_ms"].notna().all():
            m_run, m_wait = occupancy(req["arrival_ms"], req["scheduled_ms"], req["completion_ms"], t)
            ax.plot(
                t / 1000,
                m_run if name == "running" else m_wait,
                label="measured (requests)",
                color="tab:blue",
            )
        ax.plot(t / 1000, series, label="simulated (requests)", color="tab:orange")
        ax.set_xlabel("time since first arrival (s)")
        ax.set_ylabel(f"{name} requests")
        ax.legend(fontsize=8)
    fig.suptitle(title or f"{run.name}: running and waiting requests")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
