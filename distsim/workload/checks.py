"""The workload modules' validators: the shared ones of distsim.validators, under one name here.

Each workload module checks its own keys with these as it builds its part of the source (distsim.workload.source
and what it calls); the workload's SLO defaults, which the cluster reads, are distsim.workload.settings'.
"""

from distsim.validators import (  # noqa: F401  (re-exported for the workload modules)
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
