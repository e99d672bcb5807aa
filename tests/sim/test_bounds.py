"""Independent lower bounds on the step: computed from first principles, not from the simulator's parts.

- Compute: the busiest GPU must do its share of the model's exact training FLOPs (plus recompute) at no
  more than the GPU's peak rate.
- Communication (NCCL, balanced routing): every dispatch and combine sends ``T * K * D * 2`` bytes per
  rank, the fraction of experts outside the rank's node crosses a NIC; a NIC moves at most its line
  rate per direction.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.accounting import exact_flops_per_token, stage_layers
from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.specs import ParallelPlan

MODEL = load_model("deepseek-v3-16b")
N_GPUS = 32

plans = st.builds(
    lambda pp, ep, ac, precision, nic_gbps, mb: (
        ParallelPlan(pp=pp, ep=min(ep, N_GPUS // pp), dp_shard=N_GPUS // pp, seq_len=2048, micro_batch=mb,
                     global_batch=(N_GPUS // pp) * mb * 2 * pp, ac=ac, precision=precision),
        nic_gbps,
    ),
    st.sampled_from([1, 2]), st.sampled_from([8, 16, 32]), st.sampled_from(["none", "selective", "full"]),
    st.sampled_from(["bf16", "mxfp8-grouped", "mxfp8"]), st.sampled_from([100.0, 400.0, 1600.0]),
    st.sampled_from([1, 2]),
)


def cluster(nic_gbps: float):
    base = load_cluster("hgx-b200", n_gpus=N_GPUS)
    return dataclasses.replace(base, nic_bw_bytes_per_s=nic_gbps * 1e9 / 8)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=plans)
def test_step_is_at_least_the_compute_and_nic_lower_bounds(case: tuple[ParallelPlan, float]) -> None:
    plan, nic_gbps = case
    c = cluster(nic_gbps)
    step = predict(MODEL, c, plan).step_time_s

    tokens_per_gpu = plan.tokens_per_step / c.n_gpus
    passes = 4 if plan.ac == "full" else 3  # forward, 2x backward, and the recomputed forward
    fastest = c.gpu.fp8_flops if plan.precision != "bf16" else c.gpu.bf16_flops
    compute_bound = exact_flops_per_token(MODEL, plan.seq_len) / 3 * passes * tokens_per_gpu / fastest
    assert step >= compute_bound

    layers_per_rank = [sum(1 for layer in layers if layer >= MODEL.n_dense_layers)
                       for layers in stage_layers(MODEL, plan)]
    tokens_per_rank = plan.micro_batch * plan.seq_len
    copy_bytes = tokens_per_rank * MODEL.top_k * MODEL.dim * 2
    off_node = 1 - min(plan.ep, c.gpus_per_node) / plan.ep
    a2a_per_layer = 6 if plan.ac == "full" else 4
    nic_bound = (plan.n_microbatches * max(layers_per_rank) * a2a_per_layer * copy_bytes * off_node
                 / (c.nic_bw_bytes_per_s * c.nics_per_gpu))
    assert step >= nic_bound
