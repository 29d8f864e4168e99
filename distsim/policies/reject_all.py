"""Admission that rejects everything (a baseline: the cost of serving nothing)."""

from distsim.policies.base import ADMISSIONS, Admission


@ADMISSIONS.register("reject_all")
class RejectAll(Admission):
    def admit(self, req, now, view) -> bool:
        return False
