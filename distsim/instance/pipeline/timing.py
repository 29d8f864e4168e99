"""The stage-time algebra of a pipelined replica, and the explicit stage timetable it is checked against.

A replica of ``P`` stages runs micro-batches through them in order: stage ``k`` takes ``s_k`` over a
micro-batch, then the activations cross the boundary to stage ``k + 1`` in ``c_k`` (a latency plus bytes over
the boundary's link). vLLM V1 keeps up to ``P`` micro-batches in flight (its batch queue,
``max_concurrent_batches``); a sequence is in at most one of them, so a micro-batch is scheduled again only
once it has left the last stage and its tokens are out.

The algebra, with ``S = sum_k s_k`` and ``C = sum_k c_k``:

- one micro-batch alone (one request): it crosses every stage and boundary, ``S + C`` (``P*s + (P-1)*c``
  for equal stages); the other stages idle meanwhile (the bubble: each stage busy ``s_k`` of ``S + C``).
- ``m <= P`` micro-batches circulating (each re-enters stage 0 as soon as it left the last stage and no
  earlier one holds stage 0): in steady state each micro-batch's pass takes
  ``cycle = max(S + C, m * max_k s_k)`` (the loop through every stage holds ``m`` micro-batches; each stage
  runs one at a time), so a micro-batch completes every ``cycle / m``: for ``m = P`` equal stages
  ``s + (P-1)*c/P``, that is ``P`` times one stage's rate when the sends are small against a stage.

:func:`cycle_us` is that formula (what the step model uses for a round of ``m`` micro-batches);
:func:`timetable` is the pipeline stepped micro-batch by micro-batch and stage by stage, the invariant's
record (docs/invariants.md, INV-34: a micro-batch enters stage ``k + 1`` only after it left stage ``k`` and
its send finished; a stage runs one micro-batch at a time); tests/test_pipeline_parallel.py checks that its
steady state is :func:`cycle_us`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def cycle_us(stage_us: Sequence[float], send_us: Sequence[float], micro_batches: int) -> float:
    """One pass of each of ``micro_batches`` equal micro-batches in steady state: max(S + C, m x the slowest
    stage)."""
    return max(sum(stage_us) + sum(send_us), micro_batches * max(stage_us))


@dataclass(frozen=True)
class StageVisit:
    """One micro-batch's pass over one stage: when it entered and left it."""

    micro_batch: int
    round: int
    stage: int
    enter_us: float
    leave_us: float


def timetable(stage_us: Sequence[float], send_us: Sequence[float], micro_batches: int, rounds: int) -> list[StageVisit]:
    """Every stage visit of ``micro_batches`` micro-batches circulating for ``rounds`` passes each, from time 0:
    stage 0 takes them in order (round by round, micro-batch by micro-batch), a micro-batch enters stage k + 1
    when it left stage k, its send finished and the stage is free, and re-enters stage 0 when it left the
    last stage."""
    p = len(stage_us)
    free = [0.0] * p  # when each stage is next free
    back = [0.0] * micro_batches  # when each micro-batch's tokens are out (it may be scheduled again)
    visits = []
    for r in range(rounds):
        for j in range(micro_batches):
            ready = back[j]
            for k in range(p):
                enter = max(ready, free[k])
                leave = enter + stage_us[k]
                free[k] = leave
                visits.append(StageVisit(j, r, k, enter, leave))
                ready = leave + (send_us[k] if k < p - 1 else 0.0)
            back[j] = ready
    return visits


def check_timetable(visits: Sequence[StageVisit], stage_us: Sequence[float], send_us: Sequence[float]) -> None:
    """Raise SimulationError unless the timetable is causal (INV-34): each visit lasts its stage's time, a
    micro-batch enters stage k + 1 only after it left stage k and its send finished, and it re-enters stage 0
    only after it left the last stage; a stage runs one micro-batch at a time."""
    from distsim.errors import SimulationError

    p = len(stage_us)
    last: dict[int, StageVisit] = {}  # each micro-batch's previous visit
    for v in sorted(visits, key=lambda v: (v.round, v.micro_batch, v.stage)):
        if abs(v.leave_us - v.enter_us - stage_us[v.stage]) > 1e-9:
            raise SimulationError(f"INV-34: micro-batch {v.micro_batch} took {v.leave_us - v.enter_us} on stage {v.stage}")
        prev = last.get(v.micro_batch)
        if prev is not None:
            ready = prev.leave_us + (send_us[prev.stage] if prev.stage < p - 1 else 0.0)
            if v.stage != (prev.stage + 1) % p or v.enter_us < ready - 1e-9:
                raise SimulationError(f"INV-34: micro-batch {v.micro_batch} entered stage {v.stage} at {v.enter_us}"
                                      f" before it was ready ({ready}) from stage {prev.stage}")
        last[v.micro_batch] = v
    for k in range(p):
        on_stage = sorted((v for v in visits if v.stage == k), key=lambda v: v.enter_us)
        for a, b in zip(on_stage, on_stage[1:]):
            if b.enter_us < a.leave_us - 1e-9:
                raise SimulationError(f"INV-34: stage {k} ran two micro-batches at once ({a.micro_batch}, {b.micro_batch})")
