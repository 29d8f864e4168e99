"""``python -m distsim.calibrate``: :func:`distsim.calibrate.cli.main`."""

from distsim import command
from distsim.calibrate.cli import main

command.run("distsim.calibrate", main)  # a full or closed stdout, and Ctrl-C, as one line
