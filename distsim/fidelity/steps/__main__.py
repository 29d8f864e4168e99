"""``python -m distsim.fidelity.steps``: :func:`distsim.fidelity.steps.cli.main`."""

import sys

from distsim.fidelity.steps.cli import main

sys.exit(main())
