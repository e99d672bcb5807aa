"""moesim's executable reference: one DeepSeek-V3-family decoder layer in PyTorch.

MLA attention and an MoE FFN (sigmoid/softmax routing with a selection bias and group-limited top-k,
shared experts, routed experts as grouped GEMMs in fp32, bf16 or MXFP8 through TorchAO), with token
dispatch through a local path, ``all_to_all_single`` (gloo or NCCL) or DeepEP. ``python -m
reference.run`` (or ``torchrun ... -m reference.run``) times it and writes a Kineto trace whose ranges
carry the simulator's op names (:mod:`sim.ops`) plus a ``meta.json``.

Modules: :mod:`~reference.norm`, :mod:`~reference.attention`, :mod:`~reference.router`,
:mod:`~reference.experts` (GEMM backends), :mod:`~reference.permute`, :mod:`~reference.dispatch`,
:mod:`~reference.moe`, :mod:`~reference.layer`, :mod:`~reference.run`, :mod:`~reference.meta`.
"""

from __future__ import annotations

from reference.quiet import quiet_torchao

__all__: list[str] = []

quiet_torchao()  # before any TorchAO import: its warnings never reach the reference's output
