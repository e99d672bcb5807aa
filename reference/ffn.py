"""Dense SwiGLU feed-forward: the FFN of the first (dense) layers and the MoE's shared experts.

Shape letters: T tokens, D model dim, F hidden dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from reference.weights import fill_normal_

__all__ = ["SwiGLU"]


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)`` with hidden size ``hidden_dim``."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Draw w1, w3, w2 (in that order) from N(0, std**2) (w2 scaled down by sqrt 2)."""
        fill_normal_(self.w1.weight, std, generator)
        fill_normal_(self.w3.weight, std, generator)
        fill_normal_(self.w2.weight, std / math.sqrt(2.0), generator)

    def forward(self, x_TD: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x_TD)) * self.w3(x_TD))
