"""``python -m distsim.fidelity.steps``: :func:`distsim.fidelity.steps.cli.main`."""

from distsim import command
from distsim.fidelity.steps.cli import main

command.run("distsim", main)  # a full or closed stdout, and Ctrl-C, as one line
