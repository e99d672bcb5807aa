"""The MoE block: router, dispatch, routed grouped-GEMM experts, combine, shared experts.

Shape letters: T tokens, D model dim, F expert hidden dim, E experts, e local experts, K top-k,
M padded routed rows.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.profiler import record_function

from reference import names
from reference.dispatch.base import Dispatcher
from reference.experts import GemmBackend, GroupedExperts
from reference.ffn import SwiGLU
from reference.router import Router
from sim.specs import ModelSpec

__all__ = ["MoE"]


class MoE(nn.Module):
    """One MoE FFN of ``spec`` whose routed experts run through ``gemm`` and ``dispatcher``.

    This rank holds ``dispatcher.n_local`` routed experts; router and shared experts are replicated.
    """

    def __init__(self, spec: ModelSpec, gemm: GemmBackend, dispatcher: Dispatcher) -> None:
        super().__init__()
        if dispatcher.n_experts != spec.n_routed_experts:
            raise ValueError(
                f"dispatcher routes {dispatcher.n_experts} experts but model {spec.name!r} has "
                f"{spec.n_routed_experts}"
            )
        self.gemm = gemm
        self.dispatcher = dispatcher
        self.router = Router(spec)
        self.experts = GroupedExperts(
            spec.dim, spec.moe_inter_dim, spec.n_routed_experts, dispatcher.n_local, dispatcher.first_expert
        )
        self.shared = (
            SwiGLU(spec.dim, spec.n_shared_experts * spec.moe_inter_dim) if spec.n_shared_experts else None
        )

    def init_weights(self, generator: torch.Generator, std: float = 0.02, bias_std: float = 0.0) -> None:
        """Router, all routed experts (this rank keeps its slice), shared experts, in that order."""
        self.router.init_weights(generator, std=std, bias_std=bias_std)
        self.experts.init_weights(generator, std=std)
        if self.shared is not None:
            self.shared.init_weights(generator, std=std)

    def forward(self, x_TD: torch.Tensor) -> torch.Tensor:
        """Routed-expert mixture plus shared experts for tokens ``x_TD``; returns (T, D)."""
        with record_function(names.MOE_ROUTER):
            idx_TK, weight_TK = self.router(x_TD)
        routed = self.dispatcher.dispatch(x_TD, idx_TK, weight_TK, self.gemm.alignment)
        y_MD = self.experts(routed.x_MD, routed.offs_e, self.gemm)
        out_TD = self.dispatcher.combine(y_MD, routed.handle)
        if self.shared is not None:
            with record_function(names.MOE_SHARED_EXPERT):
                out_TD = out_TD + self.shared(x_TD)
        return out_TD
