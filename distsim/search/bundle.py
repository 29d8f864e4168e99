"""Bundles: a policy together with the parts of the control plane around it (admission, the engine's
scheduling order and limits, the prefill:decode split, the autoscaler), as one candidate of a search.

A searched bundle is a point of ``search.space`` whose keys are the policy's (``policy.*``, written into
the policy file) and the bundle's (``cluster.engine.*``, ``cluster.pools.*``, ``cluster.autoscale.*``,
carried as overrides beside it); a part whose ``when`` is unmet sets no key (distsim.search.space).

The built-in bundles are the baseline grid (``search.baseline_grid``): every built-in routing policy x
waiting-queue order x admission policy, each at its defaults (the admission's parameters from its own
conf/policy file), judged on the held-out families beside ``search.baselines`` with the same fitness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from distsim import outputs
from distsim.config.compose import CONF_DIR
from distsim.errors import ConfigError
from distsim.search.space import SearchSpace, Value

ADMISSION_KEY = "policy.admission"
# A derived key: the share of a P/D fleet's instances that prefill. It is not a config key: each family
# turns it into its own pools' counts (:func:`derive`), so one gene splits any P/D fleet, and a family
# without P/D pools ignores it.
PD_SHARE = "bundle.pd_prefill_share"


@dataclass(frozen=True)
class Bundle:
    """A name and the overrides that make it: the policy file, then the bundle's keys."""

    name: str
    overrides: tuple[str, ...]


def split(values: Mapping[str, Value]) -> tuple[dict[str, Value], dict[str, Value]]:
    """A candidate's values as (policy keys, bundle keys)."""
    policy = {k: v for k, v in values.items() if k.startswith("policy.")}
    return policy, {k: v for k, v in values.items() if not k.startswith("policy.")}


def pd_pools(scenario: Sequence[str]) -> tuple[int, int, int, int] | None:
    """(prefill pool's index, its count, decode pool's index, its count) of the scenario's overrides: the
    pools of the last ``cluster=NAME`` group (conf/cluster/NAME.yaml) with any ``cluster.pools.N.count``
    overrides applied; None without a prefill and a decode pool."""
    group = next((o.split("=", 1)[1] for o in reversed(scenario) if o.startswith("cluster=")), None)
    if group is None or not (CONF_DIR / "cluster" / f"{group}.yaml").exists():
        return None
    pools = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "cluster" / f"{group}.yaml")).get("pools") or []
    counts = [int(p.get("count", 1)) for p in pools]
    for o in scenario:
        key, _, value = o.partition("=")
        parts = key.split(".")
        if len(parts) == 4 and parts[:2] == ["cluster", "pools"] and parts[3] == "count" and parts[2].isdigit():
            if int(parts[2]) < len(counts):
                counts[int(parts[2])] = int(value)
    roles = [p.get("role", "mixed") for p in pools]
    if roles.count("prefill") != 1 or roles.count("decode") != 1:
        return None
    i, j = roles.index("prefill"), roles.index("decode")
    return i, counts[i], j, counts[j]


def derive(scenario: Sequence[str], candidate: Sequence[str]) -> list[str]:
    """The candidate's overrides for this scenario: :data:`PD_SHARE` becomes the P/D pools' counts (the
    same instances in all, at least one each), or nothing where the scenario has no P/D pools."""
    out = []
    for o in candidate:
        if not o.startswith(PD_SHARE + "="):
            out.append(o)
            continue
        pools = pd_pools(scenario)
        if pools is None:
            continue
        i, n_prefill, j, n_decode = pools
        total = n_prefill + n_decode
        prefill = min(max(round(float(o.split("=", 1)[1]) * total), 1), total - 1)
        out += [f"cluster.pools.{i}.count={prefill}", f"cluster.pools.{j}.count={total - prefill}"]
    return out


def admission_overrides(name: str) -> list[str]:
    """The admission section of conf/policy/<name>.yaml as overrides (``always``: no admission)."""
    if name == "always":
        return [f"{ADMISSION_KEY}.kind=always"]
    path = CONF_DIR / "policy" / f"{name}.yaml"
    if not path.exists():
        raise ConfigError("search.baseline_grid.admission", f"no conf/policy/{name}.yaml")
    node = OmegaConf.to_container(OmegaConf.load(path)).get("admission") or {}
    if node.get("kind") in (None, "always"):
        raise ConfigError("search.baseline_grid.admission", f"conf/policy/{name}.yaml has no admission policy")
    return [f"{ADMISSION_KEY}.{k}={v}" for k, v in node.items()]


def grid(node: Mapping | None) -> list[Bundle]:
    """The built-in bundles of ``search.baseline_grid`` ({routing, scheduler, admission}: lists), named
    routing+scheduler+admission; none without the node."""
    if not node:
        return []
    node = dict(node)
    unknown = set(node) - {"routing", "scheduler", "admission"}
    if unknown:
        raise ConfigError(f"search.baseline_grid.{sorted(unknown)[0]}", "unknown key (routing, scheduler, admission)")
    routing = [str(x) for x in node.get("routing") or ()]
    scheduler = [str(x) for x in node.get("scheduler") or ("fcfs",)]
    admission = [str(x) for x in node.get("admission") or ("always",)]
    if not routing:
        raise ConfigError("search.baseline_grid.routing", "needs at least one built-in policy")
    for r in routing:
        if not (CONF_DIR / "policy" / f"{r}.yaml").exists():
            raise ConfigError("search.baseline_grid.routing", f"no conf/policy/{r}.yaml")
    from distsim.instance.queues import QUEUES

    for q in scheduler:
        if q not in QUEUES:
            raise ConfigError("search.baseline_grid.scheduler", f"{q!r} is not one of {', '.join(sorted(QUEUES))}")
    admits = {a: admission_overrides(a) for a in admission}
    return [
        Bundle(f"{r}+{q}+{a}", (f"policy={r}", f"cluster.engine.scheduler={q}", *admits[a]))
        for r in routing
        for q in scheduler
        for a in admission
    ]


def bundle_overrides(values: Mapping[str, Value]) -> list[str]:
    """The bundle's keys of a candidate as overrides (the policy's go into its file)."""
    return SearchSpace.overrides(split(values)[1])


def write_bundle(out: Path, name: str, values: Mapping[str, Value]) -> Path:
    """bundle.txt: the command that runs the evolved bundle in the simulator (its policy file, then the
    bundle's overrides, one per line after the command, for a sweep or a script)."""
    extra = bundle_overrides(values)
    keys = [o for o in extra if not o.startswith(PD_SHARE + "=")]
    share = [o.split("=", 1)[1] for o in extra if o.startswith(PD_SHARE + "=")]
    pd = (
        f"# On a P/D fleet of N instances, {share[0]} x N of them prefill (at least one of each role): set\n"
        "# cluster.pools.<i>.count of the prefill and decode pools so (the search does: distsim.search.bundle.derive).\n"
    ) if share else ""
    text = (
        "# The evolved bundle: run it with\n"
        f"#   python -m distsim hydra.searchpath=[file://{out.resolve()}] policy={name} {' '.join(keys)}\n"
        + pd
        + "# Its overrides besides the policy file, one per line:\n"
        + "".join(f"{o}\n" for o in extra)
    )
    return outputs.write_text(out / "bundle.txt", text)


def read_bundle(path: Path) -> list[str]:
    """The overrides of a bundle.txt (what :func:`write_bundle` wrote)."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]


def names(bundles: Sequence[Bundle]) -> list[str]:
    return [b.name for b in bundles]
