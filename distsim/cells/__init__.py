"""The cell layer: the fleet split into cells behind a front router (``cluster.cells``).

Each cell is a set of pools (an equal share of every configured pool) with its own admission policy,
router, signal board and prefix index: a :class:`distsim.cluster.cluster.Cluster` over its instances. A
front router picks a cell for each arriving request from per-cell summaries that are refreshed with their
own staleness and transport delay (:mod:`distsim.cells.directory`); the request travels to the cell over
a network whose round trips come from Vivaldi-style coordinates (:mod:`distsim.cells.network`); a
saturated cell may pass it on to another (spill-over); the tokens travel back to the front. The fleet
(:mod:`distsim.cells.fleet`) holds it together; :mod:`distsim.cells.build` assembles it, as
:mod:`distsim.cells.feature` asks the world builder (distsim.world).
"""
