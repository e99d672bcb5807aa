"""moesim's command line: the top floor, over ``sim``, ``calibrate``, ``studies`` and ``reference``.

No package imports ``moesim``; ``moesim`` may import every package (the reference only in a subprocess).
``moesim.__version__`` is read from the installed package's metadata on first use (importlib.metadata costs
~20 ms at start-up, which a prediction's text output does not need).
"""

from __future__ import annotations

from functools import cache

__all__ = ["__version__"]


@cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("moesim")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'moesim' has no attribute {name!r}")
