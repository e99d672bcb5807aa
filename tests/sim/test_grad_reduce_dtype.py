"""A plan names the dtype its gradients accumulate and reduce in (Megatron ``grad_reduce_in_fp32``): the
DeepSeek-V3 recipes of Megatron-Bridge set it False, so their gradient buffer and reduce-scatter are BF16."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.accounting import memory_per_gpu
from sim.catalog import load_gpu, load_model
from sim.errors import ConfigError
from sim.specs import ParallelPlan
from sim.stacks import load_stack, profile_for
from studies._sim import predict_run
from studies.dataset import load_runs, resolve_run

PLAN = dict(pp=4, pp_schedule="1f1b", ep=8, dp_shard=16, global_batch=256, seq_len=4096, ac="selective")


def test_bf16_reduction_halves_the_zero1_gradient_buffer_and_leaves_the_rest() -> None:
    model, gpu, stack = load_model("deepseek-v3-16b"), load_gpu("b200"), load_stack("megatron")
    fp32 = memory_per_gpu(model, ParallelPlan(**PLAN), gpu, stack)  # type: ignore[arg-type]
    bf16 = memory_per_gpu(model, ParallelPlan(grad_reduce_dtype="bf16", **PLAN), gpu, stack)  # type: ignore[arg-type]
    assert stack.grad_bytes == 4
    assert bf16.grads_bytes == pytest.approx(fp32.grads_bytes / 2, rel=1e-12)
    assert (bf16.weights_bytes, bf16.optimizer_bytes, bf16.activations_bytes) == (
        fp32.weights_bytes, fp32.optimizer_bytes, fp32.activations_bytes)
    # naming the stack's own width changes nothing
    same = memory_per_gpu(model, ParallelPlan(grad_reduce_dtype="fp32", **PLAN), gpu, stack)  # type: ignore[arg-type]
    assert same == fp32


@pytest.mark.parametrize("bad", ["fp16", "float32", "BF16"])
def test_unknown_dtype_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="grad_reduce_dtype"):
        ParallelPlan(grad_reduce_dtype=bad, **PLAN)  # type: ignore[arg-type]


def test_cli_refuses_a_bad_dtype_with_exit_2() -> None:
    out = subprocess.run([sys.executable, "-m", "moesim", "predict", "--model", "debug", "--gpus", "8", "--ep", "4",
                          "--grad-reduce-dtype", "fp16"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "grad-reduce-dtype" in out.stderr and "Traceback" not in out.stderr


def test_every_measured_run_fits_in_its_gpu() -> None:
    """They ran: a prediction that does not fit one of them overstates memory."""
    for run in load_runs():
        model, cluster, plan = resolve_run(run)
        pred = predict_run(model, cluster, plan, profile_for(run.stack, run.release), name=run.id)
        assert pred.fits_in_memory, (run.id, pred.peak_memory_bytes / 2**30, pred.memory_capacity_bytes / 2**30)


def test_the_deepseek_v3_megatron_runs_reduce_in_bf16_as_their_recipe() -> None:
    # the Megatron-Bridge performance-table runs (the MLPerf submission's configs do not say)
    runs = [r for r in load_runs() if r.id.startswith("mcore-") and r.model == "deepseek-v3-671b"]
    assert len(runs) == 7
    assert all(r.plan.get("grad_reduce_dtype") == "bf16" and "grad_reduce_in_fp32 = False" in r.notes for r in runs)
    assert all("grad_reduce_dtype" not in r.plan for r in load_runs() if r.model.startswith("qwen3"))
