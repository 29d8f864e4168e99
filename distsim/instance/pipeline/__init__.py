"""Pipeline parallelism (``cluster.engine.pipeline_parallel_size``): a replica's layers split into stages, each
on its own tensor-parallel group, with micro-batches in flight through them as vLLM V1 runs them.

The parts: the layer partition and each stage's memory (partition.py), the stage-time algebra and an explicit
stage timetable it is checked against (timing.py), the step model of a pipelined replica (latency.py) and the
settings as resolved from the config (settings.py). Off by default (1 stage): a replica without it is built
exactly as before and pays nothing for it.
"""
