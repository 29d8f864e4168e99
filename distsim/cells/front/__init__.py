"""Front routers, one module each, registered in distsim.cells.registry.FRONTS."""
