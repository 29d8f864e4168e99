"""Autoscaling: pools that grow and shrink between a minimum and a maximum while the run goes on.

A pool with ``autoscale.kind`` set is built with ``max`` replicas, of which ``count`` serve at the start;
the others are off and cost nothing. Every ``interval_s`` the pool's scaler (one module per kind in
``kinds/``, registered in ``registry.py``) reads the pool's signals and says how many replicas it wants; the
controller (``controller.py``) clamps that to [min, max], holds scale-downs to the highest count wanted in
the last ``cooldown_s`` (Kubernetes HPA's scale-down stabilisation window) and applies it: a new replica is
billed from the moment it is asked for but serves only after its provisioning delay; a replica scaled down
stops taking requests at once, finishes what it holds, then leaves (``drain.py``). Routers see only
serving replicas: their views' members change and each policy hears of it (``Router.members_changed``).
Without ``autoscale.kind`` none of this exists and nothing changes.
"""
