"""Shortest prompt first: cuts mean TTFT under load at the risk of starving long prompts."""

from __future__ import annotations

from distsim.instance.queues.keyed import KeyedQueue
from distsim.instance.queues.registry import QUEUES
from distsim.request import Request


@QUEUES.register("shortest_prompt")
class ShortestPromptQueue(KeyedQueue):
    """Fewer prompt tokens first, FCFS among equal prompts."""

    __slots__ = ()

    def key(self, req: Request) -> tuple:
        return (req.prompt_tokens, req.arrival_us)
