"""LoRA adapters as vLLM serves them (``cluster.engine.lora``, ``workload.lora``; docs/guide/lora.md)."""
