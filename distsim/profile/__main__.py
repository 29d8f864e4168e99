"""``python -m distsim.profile``: :func:`distsim.profile.cli.main`."""

from distsim import command
from distsim.profile.cli import main

command.run("distsim.profile", main)  # a full or closed stdout, and Ctrl-C, as one line
