"""LoRA affinity: 1 for the instances whose GPU slots hold the request's adapter (or are loading it), 0
elsewhere (distsim.lora; the view's directory): a request sent where its adapter is warm skips the load
and takes no slot from another adapter. As prefix_affinity, instances more than ``load_guard``
outstanding requests above the least loaded score 0, so one popular adapter cannot pull all traffic onto
the instances that hold it. A request for the base model scores 0 everywhere (it changes nothing)."""

from distsim.policies.scorers.base import SCORERS, Scorer, as_vector, guard_load


@SCORERS.register("lora_affinity")
class LoraAffinityScorer(Scorer):
    def __init__(self, params):
        super().__init__(params)
        self.guard = float(params.load_guard)

    def score(self, req, view):
        return as_vector(self.bound(req, view)[0], view.n)

    def bound(self, req, view):
        if req.adapter < 0:
            return 0.0, None
        held = view.adapter_resident(req.adapter)
        if not held.any():
            return 0.0, None
        return guard_load(held, view, self.guard), None
