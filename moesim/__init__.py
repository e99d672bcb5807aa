"""moesim's command line: the top floor, over ``sim``, ``calibrate``, ``studies`` and ``reference``.

No package imports ``moesim``; ``moesim`` may import every package (the reference only in a subprocess).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("moesim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
