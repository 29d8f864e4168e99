"""The workload's validators live in the one checks module, distsim.config.checks."""

from distsim.config.checks import (  # noqa: F401  (re-exported for the workload modules)
    choice,
    fraction,
    integer,
    is_set,
    non_negative,
    number,
    number_list,
    positive,
    required,
    warn_unread,
)
