"""A layer-level check of the step's cost path: one MoE layer's forward and backward, alone.

Megatron-LM's MoE performance regression test (``tests/functional_tests/test_cases/common/moe_perf``) times
one ``MoELayer`` (no attention, no norm around it) on 8 GPUs: a forward and a backward of ``tokens_per_gpu``
tokens, with CUDA events, after a long dummy GEMM that hides the launch of the first kernels. This module
predicts such a cell with the very engine a training step uses: the MoE layer's op lists of
:class:`sim.workload.Workload` (kept: the ops named ``moe.*`` and the dispatcher's ``a2a.*`` preliminaries,
minus ``moe.norm``, which belongs to the transformer layer, not to ``MoELayer``), timed by
:class:`sim.predict.timing.Context` (cost model x stack profile; all-to-alls from :mod:`sim.comm`) and run
op by op by :func:`sim.predict.layers.simulate_layer`. Nothing here times an op itself.

Host and launch costs: the dummy GEMM (about 1.4 ms on an H100) lets the CPU run ahead by more than a
layer's launches take, so per-kernel launch costs are hidden (:data:`HIDDEN_LAUNCH`); the stack's blocking host
syncs before a dispatch (NCCL's split-size copy, DeepEP's and Hybrid-EP's receive counts) stay in, since a
sync drains the queue, which is what the joint calibration's ``host.sync_s`` stands for. The ranks reach each
DeepEP barrier together (:data:`QUIET_ARRIVALS`). No recompute (a plain forward
and backward: ``ac = "none"``). No weight quantisation: with an FP8 recipe Transformer Engine casts a weight
only when its module is told this is a step's first microbatch; Megatron's TE wrappers pass
``is_first_microbatch`` and clear it after their first forward, and only the training schedule sets it again
(``set_is_first_microbatch``), which the benchmark, calling the layer directly, never runs. Its timed
iterations (after five warm-ups) reuse the FP8 weights cached at the first one (TE ``GroupedLinear``:
``update_workspace = is_first_microbatch is None or is_first_microbatch``), so the layer's ops are the
activations' casts and the GEMMs; a training step's once-per-step cast is :meth:`Workload.step_ops`'.

Shape letters: T tokens, D model dim, F expert hidden dim, E experts, e local experts, K top-k.

>>> cell = MoELayerCell(id="toy", dim=256, moe_inter_dim=128, n_experts=8, top_k=2, cluster="hgx-h100",
...                     gpus=8, ep=8, tokens_per_gpu=512, ep_backend="nccl", precision="bf16")
>>> r = predict_moe_layer(cell)
>>> r.forward_s > 0, abs(sum(r.forward_parts.values()) - r.forward_s) < 1e-12
(True, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sim import ops
from sim.catalog import load_cluster
from sim.costs import CostModel, default_costs
from sim.errors import ConfigError
from sim.joint import shipped_values
from sim.predict import simulation_context, validate_plan
from sim.predict.layers import simulate_layer
from sim.specs import ModelSpec, ParallelPlan
from sim.stacks import load_stack
from sim.workload import OpSpec, Workload

__all__ = ["HIDDEN_LAUNCH", "KERNELS_ALONE", "MOE_LAYER_PREFIXES", "QUIET_ARRIVALS", "LayerPrediction", "MoELayerCell",
           "layer_model", "layer_plan", "predict_moe_layer"]

#: op-name prefixes of what one ``MoELayer`` runs (router, permute, dispatch, experts, combine, and the
#: dispatcher's count exchange / host sync); ``moe.norm`` is the transformer layer's, not the MoE layer's.
MOE_LAYER_PREFIXES = ("moe.", "a2a.")
_EXCLUDED = frozenset({ops.MOE_NORM})


@dataclass(frozen=True)
class MoELayerCell:
    """One single-MoE-layer benchmark: the layer's dims, where it runs, how it dispatches, in what precision.

    ``n_group``/``topk_group``: group-limited routing (DeepSeek: a token reaches at most ``topk_group`` of
    ``n_group`` expert groups); ``ep_sms``: SMs given to a DeepEP / Hybrid-EP kernel (0: the plan default);
    ``n_shared_experts``: always-on experts of ``moe_inter_dim`` each, inside the layer (TorchTitan's ``MoE``);
    ``scores_before_experts``: as :attr:`sim.specs.ModelSpec.scores_before_experts`.
    """

    id: str
    dim: int
    moe_inter_dim: int
    n_experts: int
    top_k: int
    cluster: str
    gpus: int
    ep: int
    tokens_per_gpu: int
    ep_backend: str
    precision: str
    stack: str = "megatron-26.04"
    n_group: int = 1
    topk_group: int = 1
    score_func: str = "softmax"
    ep_sms: int = 0
    n_shared_experts: int = 0
    scores_before_experts: bool = False


@dataclass(frozen=True)
class LayerPrediction:
    """Predicted forward and backward seconds of one MoE layer, and where each went (op name -> seconds of
    compute, or the exposed category of communication / host stalls: the same split a step's breakdown has)."""

    forward_s: float
    backward_s: float
    forward_parts: dict[str, float] = field(default_factory=dict)
    backward_parts: dict[str, float] = field(default_factory=dict)

    @property
    def forward_ms(self) -> float:
        return self.forward_s * 1e3

    @property
    def backward_ms(self) -> float:
        return self.backward_s * 1e3


def layer_model(cell: MoELayerCell) -> ModelSpec:
    """A one-layer MoE model with the cell's dims (attention fields are placeholders: its ops are dropped)."""
    return ModelSpec(
        name=f"{cell.id}-moe-layer", n_layers=1, dim=cell.dim, n_heads=8, vocab_size=32000,
        n_routed_experts=cell.n_experts, top_k=cell.top_k, moe_inter_dim=cell.moe_inter_dim,
        attention="gqa", n_kv_heads=8, head_dim=128, n_group=cell.n_group, topk_group=cell.topk_group,
        score_func=cell.score_func, n_shared_experts=cell.n_shared_experts,
        scores_before_experts=cell.scores_before_experts, source="single-MoE-layer benchmark proxy",
    )


def layer_plan(cell: MoELayerCell) -> ParallelPlan:
    """EP over every GPU (data-parallel shards), one sequence of ``tokens_per_gpu`` per GPU, no recompute."""
    plan = ParallelPlan(ep=cell.ep, dp_shard=cell.gpus, seq_len=cell.tokens_per_gpu, micro_batch=1,
                        global_batch=cell.gpus, ac="none", precision=cell.precision, ep_backend=cell.ep_backend,
                        routing="balanced")
    return replace(plan, deepep_sms=cell.ep_sms) if cell.ep_sms else plan


def _moe_only(op_list: list[OpSpec]) -> list[OpSpec]:
    return [op for op in op_list if op.name.startswith(MOE_LAYER_PREFIXES) and op.name not in _EXCLUDED]


#: The release scalar (``release.<stack>``) in a layer benchmark: 1, the calibration's kernel rates. The scalar is
#: fitted on whole training steps and stands for what a step of that release loses that no modelled mechanism
#: names; a layer benchmark times the layer's kernels alone, one layer, no
#: pipeline, no data parallelism, no optimizer, launches hidden, so it does not carry it. Applied, every cell of
#: measured-runs.md s8 comes out 16-89% slow; the kernels run at the calibration's rates there.
KERNELS_ALONE = 1.0

#: Launch costs of a layer benchmark whose dummy 8192^3 GEMM before each iteration lets the CPU run ahead: hidden,
#: and so is the host's issue of the layer's ops (no host floor).
HIDDEN_LAUNCH = {"launch.eager_s": 0.0, "launch.compiled_s": 0.0, "launch.graphs_s": 0.0, "host.eager_op_s": 0.0}

#: The spread of the EP ranks' arrival at a DeepEP barrier in a layer benchmark: none. Under forced balance a
#: training step's ranks still arrive apart through host launch jitter, pipeline skew and kernel jitter
#: (published.md s5 lists what the notify waits for); the joint calibration's ``ep.arrival_cv_balanced`` stands
#: for their sum. Megatron-LM's benchmark (``tests/functional_tests/test_cases/common/moe_perf/__main__.py`` at
#: d98e8a64d) calls ``torch.distributed.barrier()`` before every iteration, feeds the same input tensor every
#: iteration (the same routing), hides the launches behind the dummy GEMM and fails a case whose std/mean
#: exceeds 2%: its ranks run the same kernels from the same start, and what is left is taken as nil.
QUIET_ARRIVALS = {"ep.arrival_cv_balanced": 0.0}


def predict_moe_layer(cell: MoELayerCell, costs: CostModel | None = None,
                      params: Mapping[str, float] | None = None) -> LayerPrediction:
    """Forward and backward seconds of one MoE layer of ``cell`` (see the module docstring).

    Raises :class:`~sim.errors.ConfigError` for an unknown cluster or stack and
    :class:`~sim.errors.PlanError` for a plan that cannot run.
    """
    if cell.gpus < 1 or cell.ep < 1 or cell.tokens_per_gpu < 1:
        raise ConfigError(f"layer cell {cell.id!r}: gpus ({cell.gpus}), ep ({cell.ep}) and tokens_per_gpu "
                          f"({cell.tokens_per_gpu}) must be positive")
    stack = load_stack(cell.stack)
    cluster = stack.place(load_cluster(cell.cluster, n_gpus=cell.gpus))
    model, plan = layer_model(cell), layer_plan(cell)
    validate_plan(model, cluster, plan, stack)
    costs = costs or default_costs(cluster.gpu)
    # The joint calibration, as every prediction (``params``: candidate values of a fit), with the launches hidden.
    values = dict(shipped_values() if params is None else params, **HIDDEN_LAUNCH, **QUIET_ARRIVALS)
    values[f"release.{stack.name}"] = KERNELS_ALONE  # the release scalar is a whole step's
    ctx = simulation_context(model, cluster, plan, costs, stack, params=values)
    # The MoE layer's ops alone, handed to the context's workload before it builds any list of its own.
    full = Workload(model, plan, stack)
    ctx.wl.share_layer_ops({("moe", phase): _moe_only(full.layer_ops("moe", phase)) for phase in ("fwd", "bwd")}
                           | {("moe", "recompute"): []})
    f, b = simulate_layer(ctx, "moe", "fwd"), simulate_layer(ctx, "moe", "bwd")
    return LayerPrediction(f.time_s, b.time_s, _parts(f.parts), _parts(b.parts))


def _parts(parts: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v > 0}

