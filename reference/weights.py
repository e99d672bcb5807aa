"""Deterministic weight initialisation shared by every module.

Weights are drawn on the CPU from an explicit ``torch.Generator`` and copied to the parameter's device
and dtype, so the same seed gives the same weights on a laptop, a CPU CI runner and a GPU, in every
process of an expert-parallel group.
"""

from __future__ import annotations

import torch

__all__ = ["fill_normal_", "draw_normal"]


def draw_normal(shape: tuple[int, ...], std: float, generator: torch.Generator) -> torch.Tensor:
    """A CPU fp32 tensor of ``shape`` drawn from N(0, std**2) with ``generator``."""
    return torch.randn(shape, generator=generator, dtype=torch.float32) * std


def fill_normal_(param: torch.Tensor, std: float, generator: torch.Generator) -> None:
    """Overwrite ``param`` in place with N(0, std**2) values drawn on the CPU."""
    with torch.no_grad():
        param.copy_(draw_normal(tuple(param.shape), std, generator))
