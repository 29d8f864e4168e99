"""What a router sees of the instances, and how stale: the signal board (instance-reported signals, live
or scraped on a cadence), the router's view over it and its own router state, and the router-side prefix
index. Below the policies, which read it, and the cluster, which builds it."""
