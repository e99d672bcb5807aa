"""Shared test setup: quiet TorchAO's GPU-library loading, and a CI switch that turns skips into failures.

`.ci/run` sets MOESIM_CI=1: a test that would skip for a missing tool (not for missing GPU hardware)
fails instead, so CI never passes by skipping.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
