"""Group rows by expert and pad each group to the GEMM backend's alignment, and back.

A *layout* maps N rows, each tagged with a group (expert) id, to M >= N padded rows where every
group's rows are contiguous (stable order) and every group's size is rounded up to ``alignment``.
Padding rows are zero. All ops are differentiable index ops.

Shape letters: N rows before grouping, M padded rows, D row width, G groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["GroupLayout", "group_layout", "permute_rows", "unpermute_rows"]


@dataclass(frozen=True)
class GroupLayout:
    """Where each of N rows goes in the padded, grouped buffer.

    ``pos_N``: destination row of each input row. ``n_rows``: M, padded total (a host int: one host
    sync, as TorchTitan's permute does). ``sizes_G``: real rows per group; ``offs_G``: int32 cumulative
    *padded* group ends, what ``torch._grouped_mm`` takes.
    """

    pos_N: torch.Tensor
    n_rows: int
    sizes_G: torch.Tensor
    offs_G: torch.Tensor


def group_layout(group_N: torch.Tensor, n_groups: int, alignment: int) -> GroupLayout:
    """The padded grouped layout of rows tagged ``group_N`` (int ids in ``[0, n_groups)``)."""
    group_N = group_N.long()
    sizes_G = torch.bincount(group_N, minlength=n_groups)
    padded_G = (sizes_G + alignment - 1) // alignment * alignment
    padded_start_G = torch.cumsum(padded_G, 0) - padded_G
    real_start_G = torch.cumsum(sizes_G, 0) - sizes_G
    order_N = torch.argsort(group_N, stable=True)
    sorted_group_N = group_N[order_N]
    rank_in_group_N = torch.arange(group_N.numel(), device=group_N.device) - real_start_G[sorted_group_N]
    pos_N = torch.empty_like(order_N)
    pos_N[order_N] = padded_start_G[sorted_group_N] + rank_in_group_N
    offs_G = torch.cumsum(padded_G, 0).to(torch.int32)
    n_rows = int(offs_G[-1].item()) if n_groups else 0
    return GroupLayout(pos_N=pos_N, n_rows=n_rows, sizes_G=sizes_G, offs_G=offs_G)


def permute_rows(x_ND: torch.Tensor, layout: GroupLayout) -> torch.Tensor:
    """Scatter rows into the padded grouped buffer (M, D); padding rows are zero."""
    out_MD = x_ND.new_zeros((layout.n_rows, x_ND.shape[-1]))
    return out_MD.index_put((layout.pos_N,), x_ND)


def unpermute_rows(y_MD: torch.Tensor, layout: GroupLayout) -> torch.Tensor:
    """Gather the real rows back into their original order (N, D)."""
    return y_MD.index_select(0, layout.pos_N)
