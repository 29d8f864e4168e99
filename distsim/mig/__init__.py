"""MIG slices as a run's feature: each sliced instance's price and GPU share in instances.parquet, and
summary.json's ``mig`` (how the fleet packs). The slices' placement itself: distsim.cluster.mig."""
