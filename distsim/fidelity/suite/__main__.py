"""``python -m distsim.fidelity.suite``: :func:`distsim.fidelity.suite.replay.main`."""

import sys

from distsim.fidelity.suite.replay import main

sys.exit(main())
