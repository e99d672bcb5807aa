"""``python -m reference``: the same as ``python -m reference.run``."""

import sys

from reference.run import main

sys.exit(main())
