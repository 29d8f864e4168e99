"""One vLLM-like serving instance: step scheduler, KV block manager with prefix cache, latency models."""
