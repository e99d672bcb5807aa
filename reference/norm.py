"""RMSNorm, computed in fp32 and cast back to the input dtype.

Shape letters: T tokens, D model dim (any trailing width).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x_TD: torch.Tensor) -> torch.Tensor:
        x32_TD = x_TD.float()
        y_TD = x32_TD * torch.rsqrt(x32_TD.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y_TD * self.weight.float()).to(x_TD.dtype)

    def init_weights(self, generator: torch.Generator) -> None:  # noqa: ARG002 - same signature as others
        """Reset to ones (no randomness; the generator keeps the common signature)."""
        with torch.no_grad():
            self.weight.fill_(1.0)
