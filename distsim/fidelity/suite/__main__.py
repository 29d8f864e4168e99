"""``python -m distsim.fidelity.suite``: :func:`distsim.fidelity.suite.replay.main`."""

from distsim import command
from distsim.fidelity.suite.replay import main

command.run("distsim", main)  # a full or closed stdout, and Ctrl-C, as one line
