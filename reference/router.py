"""Token-choice top-k router of the DeepSeek-V3 family.

scores = sigmoid(x W^T) or softmax(x W^T); a load-balancing bias (DeepSeek-V3's auxiliary-loss-free
balancing) is added to the scores for *selection only*; with ``n_group > 1`` a token may only pick
experts from its ``topk_group`` best groups (group score: sum of the top-2 biased scores with a bias,
max score without one); the gate weights are the *unbiased* scores of the chosen experts, normalised to
sum to 1 when ``norm_topk_prob`` and multiplied by ``route_scale``.

Shape letters: T tokens, D model dim, E experts, K top-k, G groups.
"""

from __future__ import annotations

import torch
from torch import nn

from reference.weights import fill_normal_
from sim.specs import ModelSpec

__all__ = ["Router", "route"]


def route(
    logits_TE: torch.Tensor,
    *,
    top_k: int,
    score_func: str,
    n_group: int = 1,
    topk_group: int = 1,
    route_scale: float = 1.0,
    norm_topk_prob: bool = True,
    bias_E: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select experts from router logits: returns (expert indices (T, K) int64, gate weights (T, K) fp32).

    Differentiable in ``logits_TE`` through the gate weights; the selection itself is not.

    >>> idx, w = route(torch.tensor([[0.0, 2.0, 1.0]]), top_k=2, score_func="softmax")
    >>> idx.tolist(), round(float(w.sum()), 6)
    ([[1, 2]], 1.0)
    """
    logits_TE = logits_TE.float()
    if score_func == "sigmoid":
        scores_TE = torch.sigmoid(logits_TE)
    elif score_func == "softmax":
        scores_TE = torch.softmax(logits_TE, dim=-1)
    else:
        raise ValueError(f"score_func must be 'sigmoid' or 'softmax', got {score_func!r}")
    with torch.no_grad():
        select_TE = scores_TE if bias_E is None else scores_TE + bias_E.float()
        if n_group > 1:
            T, E = select_TE.shape
            grouped_TGX = select_TE.view(T, n_group, E // n_group)
            if bias_E is None:
                group_score_TG = grouped_TGX.amax(dim=-1)
            else:
                group_score_TG = grouped_TGX.topk(min(2, E // n_group), dim=-1).values.sum(dim=-1)
            keep_groups_TG = group_score_TG.topk(topk_group, dim=-1).indices
            keep_TG = torch.zeros_like(group_score_TG, dtype=torch.bool).scatter_(1, keep_groups_TG, True)
            keep_TE = keep_TG.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, E)
            select_TE = select_TE.masked_fill(~keep_TE, float("-inf"))
        idx_TK = select_TE.topk(top_k, dim=-1).indices
    weight_TK = scores_TE.gather(1, idx_TK)
    if norm_topk_prob:
        weight_TK = weight_TK / (weight_TK.sum(dim=-1, keepdim=True) + 1e-20)
    return idx_TK, weight_TK * route_scale


class Router(nn.Module):
    """The gate of one MoE layer: a (E, D) projection and, for sigmoid scoring, a selection bias.

    The bias is a buffer, not a parameter: it is updated out of band from expert loads (not by the
    gradient) and only changes which experts are picked, never the gate weights.
    """

    def __init__(self, spec: ModelSpec, use_bias: bool | None = None) -> None:
        super().__init__()
        self.top_k = spec.top_k
        self.score_func = spec.score_func
        self.n_group = spec.n_group
        self.topk_group = spec.topk_group
        self.route_scale = spec.route_scale
        self.norm_topk_prob = spec.norm_topk_prob
        self.n_experts = spec.n_routed_experts
        self.gate = nn.Linear(spec.dim, spec.n_routed_experts, bias=False)
        self.use_bias = spec.score_func == "sigmoid" if use_bias is None else use_bias
        self.register_buffer("bias_E", torch.zeros(spec.n_routed_experts), persistent=True)

    def init_weights(self, generator: torch.Generator, std: float = 0.02, bias_std: float = 0.0) -> None:
        """Gate from N(0, std**2); selection bias from N(0, bias_std**2) (0: all zeros)."""
        fill_normal_(self.gate.weight, std, generator)
        with torch.no_grad():
            self.bias_E.zero_()
        if self.use_bias and bias_std > 0:
            fill_normal_(self.bias_E, bias_std, generator)

    def forward(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(expert indices (T, K), gate weights (T, K) fp32) for tokens ``x_TD``."""
        logits_TE = torch.nn.functional.linear(x_TD.float(), self.gate.weight.float())
        return route(
            logits_TE,
            top_k=self.top_k,
            score_func=self.score_func,
            n_group=self.n_group,
            topk_group=self.topk_group,
            route_scale=self.route_scale,
            norm_topk_prob=self.norm_topk_prob,
            bias_E=self.bias_E if self.use_bias else None,
        )
