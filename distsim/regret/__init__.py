"""Real regret: fork-and-replay counterfactual regret of routing decisions (fork.py, run.py)
and a per-request lower bound on latency that no routing policy can beat (bound.py)."""
