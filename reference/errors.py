"""Errors the reference raises for bad user input (all :class:`sim.errors.MoesimError`, exit code 2)."""

from __future__ import annotations

from sim.errors import ConfigError, MoesimError

__all__ = ["ConfigError", "BackendUnavailableError"]


class BackendUnavailableError(MoesimError, RuntimeError):
    """A requested backend (DeepEP build, SM100 kernels, NCCL) is not installed on this machine."""
