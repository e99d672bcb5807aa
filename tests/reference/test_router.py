"""Router math against a naive per-token loop."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from reference.router import Router, route


def naive_route(logits: list[float], *, top_k: int, score_func: str, n_group: int, topk_group: int,
                route_scale: float, norm_topk_prob: bool, bias: list[float] | None) -> tuple[list[int], list[float]]:
    """One token, plain Python: the DeepSeek-V3 gate."""
    E = len(logits)
    if score_func == "sigmoid":
        scores = [1.0 / (1.0 + math.exp(-z)) for z in logits]
    else:
        m = max(logits)
        exps = [math.exp(z - m) for z in logits]
        scores = [v / sum(exps) for v in exps]
    select = [s + (bias[i] if bias is not None else 0.0) for i, s in enumerate(scores)]
    allowed = set(range(E))
    if n_group > 1:
        size = E // n_group
        group_scores = []
        for g in range(n_group):
            members = sorted(select[g * size:(g + 1) * size], reverse=True)
            group_scores.append(sum(members[:2]) if bias is not None else members[0])
        best_groups = sorted(range(n_group), key=lambda g: -group_scores[g])[:topk_group]
        allowed = {i for g in best_groups for i in range(g * size, (g + 1) * size)}
    chosen = sorted(allowed, key=lambda i: -select[i])[:top_k]
    weights = [scores[i] for i in chosen]
    if norm_topk_prob:
        total = sum(weights)
        weights = [w / total for w in weights]
    return chosen, [w * route_scale for w in weights]


CASES = [
    dict(top_k=2, score_func="sigmoid", n_group=4, topk_group=2, route_scale=2.5, norm_topk_prob=True, bias=True),
    dict(top_k=3, score_func="sigmoid", n_group=1, topk_group=1, route_scale=1.0, norm_topk_prob=True, bias=True),
    dict(top_k=2, score_func="softmax", n_group=1, topk_group=1, route_scale=1.0, norm_topk_prob=False, bias=False),
    dict(top_k=3, score_func="softmax", n_group=4, topk_group=3, route_scale=16.0, norm_topk_prob=False, bias=False),
    dict(top_k=4, score_func="sigmoid", n_group=8, topk_group=4, route_scale=2.5, norm_topk_prob=True, bias=False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['score_func']}-g{c['n_group']}-k{c['top_k']}")
def test_route_matches_naive_loop(case: dict) -> None:
    T, E = 64, 16
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(T, E, generator=gen)
    bias = torch.randn(E, generator=gen) * 0.3 if case["bias"] else None
    kwargs = {k: v for k, v in case.items() if k != "bias"}
    idx, weight = route(logits, bias_E=bias, **kwargs)
    for t in range(T):
        want_idx, want_w = naive_route(
            logits[t].tolist(), bias=None if bias is None else bias.tolist(), **kwargs
        )
        assert sorted(idx[t].tolist()) == sorted(want_idx)
        got = dict(zip(idx[t].tolist(), weight[t].tolist()))
        for i, w in zip(want_idx, want_w):
            assert got[i] == pytest.approx(w, rel=1e-5, abs=1e-7)


def test_bias_changes_selection_but_not_weights() -> None:
    logits = torch.tensor([[0.0, 0.1, 0.2, 0.3]])
    idx, weight = route(logits, top_k=1, score_func="sigmoid", norm_topk_prob=False,
                        bias_E=torch.tensor([5.0, 0.0, 0.0, 0.0]))
    assert idx.tolist() == [[0]]
    assert weight.item() == pytest.approx(0.5)  # sigmoid(0): the bias does not enter the weight


def test_router_gradient_reaches_gate(debug_spec) -> None:
    router = Router(dataclasses.replace(debug_spec))
    router.init_weights(torch.Generator().manual_seed(0), bias_std=0.01)
    x = torch.randn(32, debug_spec.dim)
    idx, weight = router(x)
    assert idx.shape == weight.shape == (32, debug_spec.top_k)
    assert torch.allclose(weight.sum(-1), torch.full((32,), debug_spec.route_scale))
    weight.pow(2).sum().backward()
    assert router.gate.weight.grad is not None and router.gate.weight.grad.abs().sum() > 0
    assert not router.bias_E.requires_grad
