"""Hedging as a run's feature (policy.hedge): its checks against the pools and the SLO, and its report.

The hedger itself (the copies' books and timers) is the cluster's: distsim.cluster.hedging.
"""
