"""Exception types of moesim.

Every error a user can cause (a bad file, a plan that does not fit the cluster, an unknown catalog name)
is a :class:`MoesimError`. The command-line layer prints its message and exits with code 2; library
callers can catch it. Internal invariants use ``assert``.
"""

from __future__ import annotations

__all__ = ["MoesimError", "ConfigError", "CatalogError", "PlanError"]


class MoesimError(Exception):
    """Base class of every user-facing moesim error."""


class ConfigError(MoesimError, ValueError):
    """A spec file or a field value is malformed (unknown key, missing key, bad value)."""


class CatalogError(MoesimError, KeyError):
    """A name is not in the built-in catalog."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain.
        return str(self.args[0]) if self.args else ""


class PlanError(MoesimError, ValueError):
    """A parallel plan cannot run the given model on the given cluster."""
