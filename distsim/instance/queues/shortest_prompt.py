"""Shortest prompt first: cuts mean TTFT under load at the risk of starving long prompts."""

from __future__ import annotations

from distsim.instance.queues.keyed import KeyedQueue
from distsim.instance.queues.registry import QUEUES
from distsim.request import Request


@QUEUES.register("shortest_prompt")
class ShortestPromptQueue(KeyedQueue):
    """Fewer prompt tokens first, FCFS among equal prompts; with aging, a request counts ``aging`` fewer
    prompt tokens per second waited."""

    __slots__ = ()

    def key(self, req: Request) -> tuple:
        if self.aging_per_us:
            return (req.prompt_tokens + req.arrival_us * self.aging_per_us, req.arrival_us)
        return (req.prompt_tokens, req.arrival_us)
