"""Admission and routing policies: one file each, registered by name (see base.py)."""

from distsim.policies.base import ADMISSIONS, ROUTERS, Admission, PolicyContext, Router

__all__ = ["ADMISSIONS", "ROUTERS", "Admission", "PolicyContext", "Router"]
