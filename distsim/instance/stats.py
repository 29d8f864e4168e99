"""The counters an instance keeps for instances.parquet and the summary."""

from __future__ import annotations

from array import array

import numpy as np


class InstanceStats:
    """Counts and inter-token-latency samples of one instance."""

    __slots__ = (
        "busy_us",
        "prefill_busy_us",
        "steps",
        "prefill_tokens",
        "decode_tokens",
        "peak_used_blocks",
        "peak_waiting",
        "peak_running",
        "kv_change_us",
        "kv_change_blocks",
        "kv_last",
        "kv_runs",
        "preemptions",
        "completed",
        "handed_off",
        "dropped",
        "too_long",
        "admitted",
        "cached_tokens",
        "prompt_tokens",
        "itl_step_durations",
        "itl_step_weights",
        "itl_run_ends",
        "itl_run_begins",
        "itl_run_counts",
        "itl_run_weights",
        "itl_single",
        "serving_steps",
    )

    def __init__(self):
        self.busy_us = 0
        self.prefill_busy_us = 0.0  # of busy_us, each step's share by tokens that its prefill chunks took
        self.steps = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.peak_used_blocks = 0
        self.peak_waiting = 0  # the longest waiting queue a step event found
        self.peak_running = 0  # the most requests running after a step was planned
        # KV blocks in use over time, a point per change at a step event (the use planned for the step that
        # starts then, or an idle engine's rest): the time-weighted utilisation (metrics.occupancy). Lists, as
        # the ITL samples: an array's append parses its argument, some eight times a list's cost
        self.kv_change_us: list[int] = []
        self.kv_change_blocks: list[int] = []
        self.kv_last = 0  # the latest level noted (0 before the first)
        # fast-forwarded runs that took blocks after their first step, flat (no tuple per run): its number in
        # itl_run_*, first step, steps, then the decoders' block_size phase counts (distsim.instance.decode_set),
        # so the notes can be given the steps' growth at the end (metrics.occupancy.run_growth)
        self.kv_runs: list[int] = []
        self.preemptions = 0
        self.completed = 0  # requests that finished here (their last token)
        self.handed_off = 0  # P/D prefill side: prompts computed here and passed to a decode instance
        self.dropped = 0
        self.too_long = 0  # rejected on arrival: prompt + output over max_model_len
        self.admitted = 0
        self.cached_tokens = 0
        self.prompt_tokens = 0
        # Inter-token latency samples, kept weighted: a step of duration d in which b requests decode
        # gives b gaps of d. Runs of steps keep their steps' end times (the durations are derived once,
        # at the end); gaps after a preemption are single.
        self.itl_step_durations: list[int] = []
        self.itl_step_weights: list[int] = []
        self.itl_run_ends = array("q")  # the end time of every step of every run, back to back
        self.itl_run_begins: list[int] = []  # when each run began
        self.itl_run_counts: list[int] = []  # steps per run
        self.itl_run_weights: list[int] = []  # decoding requests per run
        self.itl_single: list[int] = []
        # steps by shape for the serving layer's share of busy_us (roofline3; metrics.tables.serving_columns):
        # a decode batch by its size, a step with prefill work by (tokens, sequences); None: the model has none
        self.serving_steps: dict[int | tuple[int, int], int] | None = None

    def add_run(self, begin_us: int, ends_us: list[int] | array, decoders: int) -> None:
        """A run of decode steps from ``begin_us``, its steps ending at ``ends_us``, ``decoders`` in each."""
        if type(ends_us) is list:
            self.itl_run_ends.fromlist(ends_us)
        else:
            self.itl_run_ends.extend(ends_us)  # an array("q"): a copy of its bytes
        self.itl_run_begins.append(begin_us)
        self.itl_run_counts.append(len(ends_us))
        self.itl_run_weights.append(decoders)

    @property
    def itl_run_durations(self) -> np.ndarray:
        """The duration of every step of every run, back to back (int64)."""
        ends = np.frombuffer(self.itl_run_ends, dtype=np.int64) if self.itl_run_ends else np.zeros(0, np.int64)
        durations = np.empty_like(ends)
        durations[1:] = ends[1:] - ends[:-1]
        counts = np.asarray(self.itl_run_counts, dtype=np.int64)
        first = np.cumsum(counts) - counts  # each run's first step
        durations[first] = ends[first] - np.asarray(self.itl_run_begins, dtype=np.int64)
        return durations
