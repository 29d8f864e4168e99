"""KV utilisation: 1 - the fraction of KV blocks in use (llm-d's kv-cache scorer)."""

from distsim.policies.scorers.base import SCORERS, Scorer


@SCORERS.register("kv_utilization")
class KVUtilizationScorer(Scorer):
    reads_signals = True

    def score(self, req, view):
        return 1.0 - view.kv_utilization()
