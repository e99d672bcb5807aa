"""Keep TorchAO's import-time chatter out of the reference's output.

Importing TorchAO (and its MXFP8 training prototype) writes lines a user of ``moesim reference`` cannot act
on: its logger's "Skipping import of cpp extensions ..." warning, ``UserWarning``/``DeprecationWarning``\\ s of
its prototype modules, and torch's ``_pytree`` log lines for the enums TorchAO registers as constants
("Calling register_constant() on Enum subclasses is deprecated"). :func:`quiet_torchao` (called when the
``reference`` package is imported, before any TorchAO import) sends the first to the debug level, ignores the
warnings raised from TorchAO's modules, and drops the ``_pytree`` lines; torch's own warnings and every error
still print. Standard library only: importing this module imports neither torch nor TorchAO.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_torchao"]

#: torch's logger that reports TorchAO's enum registrations, and the text that marks those records.
_PYTREE_LOGGER = "torch.utils._pytree"
_ENUM_CONSTANT = "register_constant() on Enum subclasses is deprecated"


class _DropTorchaoEnumNotices(logging.Filter):
    """Drops ``_pytree``'s deprecation notices for Enum constants (registered by TorchAO at import)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _ENUM_CONSTANT not in record.getMessage()


_FILTER = _DropTorchaoEnumNotices()


def quiet_torchao() -> None:
    """Silence TorchAO's import-time warnings (idempotent; see the module docstring)."""
    logging.getLogger("torchao").setLevel(logging.ERROR)  # its warnings move under ERROR: not printed
    warnings.filterwarnings("ignore", module=r"torchao(\.|$)")
    for category in (UserWarning, DeprecationWarning, FutureWarning):  # raised elsewhere, about TorchAO
        warnings.filterwarnings("ignore", message=r"(?s).*\btorchao\b", category=category)
    pytree = logging.getLogger(_PYTREE_LOGGER)
    if _FILTER not in pytree.filters:
        pytree.addFilter(_FILTER)
