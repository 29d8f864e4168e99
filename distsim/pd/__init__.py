"""P/D disaggregation's report (prefill and decode pools): summary.json's ``kv_transfer``. The hand-off
and the transfer themselves are the cluster's and the instances' (distsim.cluster.cluster,
distsim.instance.handoff)."""
