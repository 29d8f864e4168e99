"""``python -m distsim.calibrate``: :func:`distsim.calibrate.cli.main`."""

import sys

from distsim.calibrate.cli import main

sys.exit(main())
