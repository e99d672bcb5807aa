"""Profiler range names: the simulator's op vocabulary, as the reference uses it.

Every ``torch.profiler.record_function`` label the reference emits is one of the strings defined once in
:mod:`sim.ops`; this module re-exports them (``names.MOE_DISPATCH``) and lists the ones the reference
emits, so measured and simulated timelines line up by name.

>>> MOE_DISPATCH in REFERENCE_OPS
True
"""

from __future__ import annotations

from sim import ops
from sim.ops import *  # noqa: F403  (the shared vocabulary, re-exported under the reference's name)

#: Every range name the reference can emit: the vocabulary of one decoder layer and its dispatch.
REFERENCE_OPS: tuple[str, ...] = tuple(
    name for name in ops.ALL_OPS if name.split(".")[0] in ("attn", "moe", "mlp", "a2a")
)

__all__ = [*ops.__all__, "REFERENCE_OPS"]
