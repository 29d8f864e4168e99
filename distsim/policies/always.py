"""Admission that admits everything (the default)."""

from distsim.policies.base import ADMISSIONS, Admission


@ADMISSIONS.register("always")
class AlwaysAdmit(Admission):
    def admit(self, req, now, view) -> bool:
        return True
