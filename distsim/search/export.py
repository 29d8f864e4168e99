"""A search's winner handed over: ``python -m distsim.search.export --from OUT``.

A finished (or stopped) search leaves policy/<name>.yaml and bundle.txt (a config the simulator runs:
distsim.search.bundle). This adds, in OUT/export/:

- ``<name>.py``: the bundle as a standalone Python policy on distsim's public interface (a
  :class:`~distsim.policies.base.Router` and an :class:`~distsim.policies.base.Admission` built from the
  evolved values, and the engine settings as a dict), to read, test or register elsewhere;
- ``endpoint_picker.yaml``, where the routing is weighted scoring: an llm-d inference scheduler
  EndpointPickerConfig with the same weights (distsim.policies.endpoint_picker has the scorer table).
  llm-d has no load guard, no admission and no engine settings in that file: what the profile cannot
  say (with a P/D decider's threshold, which llm-d's pd-profile-handler takes in a P/D profile of its
  own) is listed in its header, so a deployment knows what it leaves out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from distsim import outputs
from distsim.errors import ConfigError, UserError
from distsim.policies.endpoint_picker import document
from distsim.search.bundle import read_bundle

WEIGHTED = ("weighted", "endpoint_picker")


def _policy_file(out: Path) -> Path:
    files = sorted((out / "policy").glob("*.yaml")) if (out / "policy").is_dir() else []
    if len(files) != 1:
        raise UserError(f"export error: {out}/policy/ holds {len(files)} policy files, not one: is {out} a search's directory?")
    return files[0]


def engine_settings(bundle: list[str]) -> dict[str, object]:
    """The bundle's cluster.* overrides as {key: value} (YAML values)."""
    out = {}
    for o in bundle:
        key, _, value = o.partition("=")
        out[key] = yaml.safe_load(value)
    return out


def module_text(name: str, policy: dict, bundle: dict[str, object]) -> str:
    """The standalone module's source (see the module docstring)."""
    routing, admission = dict(policy["routing"]), dict(policy.get("admission") or {"kind": "always"})
    if routing.get("kind") not in WEIGHTED:
        raise UserError(f"export error: routing kind {routing.get('kind')!r}: the Python export covers weighted routing")
    weights = {k: float(v) for k, v in (routing.get("scorers") or {}).items() if float(v) > 0}
    guard = float(routing.get("load_guard", 8))
    adm_kind = str(admission.pop("kind"))
    admission.pop("latency_ms", None)
    cls = "".join(p.capitalize() for p in name.replace("-", "_").split("_"))
    return f'''"""The evolved bundle {name!r} (python -m distsim.search, then distsim.search.export): weighted routing,
{adm_kind} admission and the engine settings below, on distsim's public policy interface.

    from {cls.lower()}_module import build_router, build_admission   # with a distsim PolicyContext
"""

from distsim.policies.base import ADMISSIONS
from distsim.policies.weighted import Weighted, WeightedParams

WEIGHTS = {weights!r}  # scorer -> weight (normalised by the router)
LOAD_GUARD = {guard!r}  # prefix affinity scores 0 beyond this many outstanding requests above the least loaded
ADMISSION_KIND = {adm_kind!r}
ADMISSION = {admission!r}  # its parameters
ENGINE = {bundle!r}  # the bundle's cluster.* settings (vLLM engine arguments by their distsim keys)
PD_DECIDER = {dict(policy.get("pd_decider") or {})!r}  # P/D fleets: policy.pd_decider (threshold_tokens null: off)


class {cls}Router(Weighted):
    """Weighted routing with the evolved weights."""

    def __init__(self, ctx):
        super().__init__(WeightedParams(load_guard=LOAD_GUARD, scorers=dict(WEIGHTS)), ctx)


def build_router(ctx):
    return {cls}Router(ctx)


def build_admission(ctx):
    policy = ADMISSIONS.get(ADMISSION_KIND)
    params = policy.Params.from_node(ADMISSION)
    params.check("policy.admission")
    return policy(params, ctx)
'''


def picker_text(name: str, policy: dict, bundle: dict[str, object]) -> str:
    routing = dict(policy["routing"])
    if routing.get("kind") not in WEIGHTED:
        raise UserError(f"export error: routing kind {routing.get('kind')!r} is not weighted scoring: no EndpointPickerConfig")
    weights = {k: float(v) for k, v in (routing.get("scorers") or {}).items()}
    try:
        doc = document(weights, routing.get("prefix_index_blocks"))
    except ConfigError as err:
        raise UserError(f"export error: {err}") from None
    left = [f"load_guard {routing.get('load_guard')}"] if weights.get("prefix_affinity", 0) > 0 else []
    admission = (policy.get("admission") or {}).get("kind", "always")
    left += [] if admission == "always" else [f"admission {admission}"]
    decider = (policy.get("pd_decider") or {}).get("threshold_tokens")
    left += [] if decider is None else [f"P/D decider: pd-profile-handler threshold {decider} (uncached prompt tokens)"]
    left += [f"{k}={v}" for k, v in bundle.items()]
    header = (
        f"# The evolved bundle {name!r} as llm-d's inference scheduler profile (python -m distsim.search.export).\n"
        "# Simulate this file itself: python -m distsim policy=llmd policy.routing.endpoint_picker=THIS_FILE\n"
        + (f"# Not expressible here (set them elsewhere): {'; '.join(left)}\n" if left else "")
    )
    return header + yaml.safe_dump(doc, sort_keys=False)


def export(out: Path) -> list[Path]:
    path = _policy_file(out)
    policy = OmegaConf.to_container(OmegaConf.load(path))
    name = str(policy.get("name") or path.stem)
    bundle = engine_settings(read_bundle(out / "bundle.txt")) if (out / "bundle.txt").exists() else {}
    where = outputs.prepare_dir(out / "export")
    written = [outputs.write_text(where / f"{name}.py", module_text(name, policy, bundle))]
    written.append(outputs.write_text(where / "endpoint_picker.yaml", picker_text(name, policy, bundle)))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distsim.search.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", type=Path, required=True, help="a search's output directory")
    args = ap.parse_args(argv)
    try:
        for p in export(args.source):
            print(p)
    except UserError as err:
        print(f"distsim.search.export: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim.search.export", main)  # a project error, a full or closed stdout, Ctrl-C: one line
