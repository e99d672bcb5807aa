"""``python -m moesim`` is the ``moesim`` command."""

import sys

from moesim.cli import main

sys.exit(main())
