"""``python -m sim`` is the ``moesim`` command."""

import sys

from sim.cli import main

sys.exit(main())
