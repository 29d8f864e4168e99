"""The timeline (``sim.timeline``) as a run's feature: timeline.json, a Chrome trace of the schedule
(distsim.timeline.trace)."""
