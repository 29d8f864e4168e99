"""The runner's settings as the driver uses them, read from the composed ``runner`` node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from distsim.config.runner import RunnerConfig


@dataclass
class RunnerSettings(RunnerConfig):
    @classmethod
    def from_node(cls, node: Mapping[str, object] | None) -> RunnerSettings:
        """From a config node (DictConfig or dict); keys the node lacks keep their defaults."""
        values = {}
        for f in fields(cls):
            if node is not None and f.name in node:
                values[f.name] = node[f.name]
        return cls(**values)

    def validate(self) -> None:
        from distsim.errors import ConfigError

        if self.num_workers is not None and self.num_workers < 1:
            raise ConfigError("runner.num_workers", f"must be >= 1 or null (got {self.num_workers})")
        if self.max_retries < 0:
            raise ConfigError("runner.max_retries", f"must be >= 0 (got {self.max_retries})")
        if self.job_timeout_s is not None and not self.job_timeout_s > 0:
            raise ConfigError("runner.job_timeout_s", f"must be > 0 seconds or null (got {self.job_timeout_s})")
        if not 0 < self.alpha < 1:
            raise ConfigError("runner.alpha", f"must be in (0, 1) (got {self.alpha})")
        if not (isinstance(self.start_timeout_s, (int, float)) and self.start_timeout_s > 0):
            raise ConfigError("runner.start_timeout_s", f"must be > 0 seconds (got {self.start_timeout_s})")
        if isinstance(self.worker_niceness, bool) or not isinstance(self.worker_niceness, int) or not 0 <= self.worker_niceness <= 19:
            raise ConfigError("runner.worker_niceness", f"must be an integer from 0 to 19 (got {self.worker_niceness!r})")
