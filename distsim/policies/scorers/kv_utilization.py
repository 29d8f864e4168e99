"""KV utilisation: 1 - the fraction of KV blocks in use (llm-d's kv-cache scorer).

Live KV use inside a fast-forwarded decode run costs work to bring up to date, and most of it would
never change a decision. So the scorer offers a bound: KV use as last brought up to date is at most the
true one (a run only takes blocks), its score at least the true score, and the router brings up to date
only the candidates that could win (SignalBoard.kv_bound)."""

from distsim.policies.scorers.base import SCORERS, Loose, Scorer


@SCORERS.register("kv_utilization")
class KVUtilizationScorer(Scorer):
    reads_signals = True

    def score(self, req, view):
        return 1.0 - view.kv_utilization()

    def bound(self, req, view):
        util, loose = view.kv_utilization_bound()
        return 1.0 - util, (StaleRuns(view) if loose else None)


class StaleRuns(Loose):
    """The candidates whose decode runs took blocks since the board last brought them up to date."""

    def __init__(self, view):
        self.view = view

    def exact(self, position):
        use = self.view.kv_utilization_exact(position)
        return None if use is None else 1.0 - use

    def among(self, positions):
        return self.view.kv_loose_among(positions)

    def positions(self):
        return self.view.kv_loose_positions()
