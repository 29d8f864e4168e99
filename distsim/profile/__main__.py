"""``python -m distsim.profile``: :func:`distsim.profile.cli.main`."""

from distsim import command
from distsim.profile.cli import main

if __name__ == "__main__":  # not in the all-reduce's spawned processes, which import this module as __mp_main__
    command.run("distsim.profile", main)  # a full or closed stdout, and Ctrl-C, as one line
