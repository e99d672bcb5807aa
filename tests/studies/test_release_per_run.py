"""Each run's own release scalar (studies.release_per_run): it recovers a planted scalar, and refuses a release the
joint fit does not cover with one line and exit code 2."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from sim.errors import MoesimError
from sim.joint import shipped_values
from sim.predict import predict
from sim.stacks import load_stack
from studies.dataset import load_runs, resolve_run
from studies.release_per_run import per_run_scalar, release_scalars


def _run(run_id: str):
    return next(r for r in load_runs() if r.id == run_id)


def test_a_planted_scalar_is_recovered() -> None:
    run = _run("titan-dsv3-h100-bf16-deepep")
    values = dict(shipped_values(), **{"release.torchtitan": 0.37})
    model, cluster, plan = resolve_run(run)
    planted = predict(model, cluster, plan, stack=load_stack("torchtitan"), params=values).tokens_per_s_per_gpu
    fake = dataclasses.replace(run, measured_tokens_per_s_per_gpu=planted)
    assert per_run_scalar(fake, shipped_values()) == pytest.approx(0.37, abs=2e-3)


def test_a_run_no_scalar_can_reach_answers_none() -> None:
    run = _run("titan-dsv3-h100-bf16-deepep")
    fake = dataclasses.replace(run, measured_tokens_per_s_per_gpu=run.measured_tokens_per_s_per_gpu * 50)
    assert per_run_scalar(fake, shipped_values()) is None


def test_the_rows_cover_the_release_and_its_held_out_runs() -> None:
    rows = release_scalars("torchtitan")
    assert {r.run for r in rows if not r.held_out} == {r.id for r in load_runs() if r.stack == "torchtitan"}
    assert any(r.held_out for r in rows) and all(r.scalar is None or 0.1 <= r.scalar <= 1.5 for r in rows)


def test_a_release_the_fit_does_not_cover_is_refused() -> None:
    values = {k: v for k, v in shipped_values().items() if k != "release.torchtitan"}
    with pytest.raises(MoesimError, match="release.torchtitan"):
        per_run_scalar(_run("titan-dsv3-b200-bf16"), values)
    out = subprocess.run([sys.executable, "-m", "studies.release_per_run", "--release", "nope"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 2 and out.stdout.count("\n") == 1 and "'nope'" in out.stdout and not out.stderr


def test_a_pair_recovers_the_scalar_under_a_time_both_steps_lack() -> None:
    """Two runs differing in their kernels alone: a planted scalar comes back from their step difference even when
    both measured steps carry the same unexplained seconds, and each run then lacks exactly those seconds."""
    from studies.release_per_run import pair_scalar, step_seconds

    planted = dict(shipped_values(), **{"release.torchtitan": 0.6})
    fakes = []
    for rid in ("titan-dsv3-b200-mxfp8-deepep", "titan-dsv3-b200-bf16-deepep"):
        run = _run(rid)
        _measured, predicted = step_seconds(run, planted)
        model, cluster, plan = resolve_run(run)
        step = predicted + 10.0  # what neither step's model holds
        fakes.append(dataclasses.replace(run, measured_tokens_per_s_per_gpu=plan.tokens_per_step / cluster.n_gpus / step))
    scalar = pair_scalar(fakes[0], fakes[1], shipped_values())
    assert scalar == pytest.approx(0.6, abs=2e-3)
    measured, predicted = step_seconds(fakes[0], dict(shipped_values(), **{"release.torchtitan": scalar}))
    assert measured - predicted == pytest.approx(10.0, abs=0.1)


def test_a_pair_of_two_releases_is_refused() -> None:
    from studies.release_per_run import pair_scalar

    with pytest.raises(MoesimError, match="not two runs of one release"):
        pair_scalar(_run("titan-dsv3-b200-bf16"), _run("mcore-26.04-dsv3-256xb200"), shipped_values())
    out = subprocess.run([sys.executable, "-m", "studies.release_per_run", "--pair", "nope", "titan-dsv3-b200-bf16"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout.strip() == "error: --pair: no run 'nope' in the shipped dataset"
    out = subprocess.run([sys.executable, "-m", "studies.release_per_run", "--pair", "titan-dsv3-b200-bf16",
                          "titan-dsv3-b200-bf16"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout.strip() == "error: --pair: two different runs, got 'titan-dsv3-b200-bf16' twice"


def test_the_pair_table_reads_the_lack_per_moe_layer_microbatch() -> None:
    """The seed's 671B plan runs 58 / 2 MoE layers a rank over 64 microbatches; the table gives every run of the
    release, the held-out ones marked, with its lack a step over that count."""
    from studies.release_per_run import moe_layer_microbatches

    assert moe_layer_microbatches(_run("titan-dsv3-b200-bf16")) == pytest.approx(58 / 2 * 64)
    out = subprocess.run([sys.executable, "-m", "studies.release_per_run", "--pair", "titan-dsv3-b200-mxfp8-deepep",
                          "titan-dsv3-b200-bf16-deepep"], capture_output=True, text=True, timeout=300, check=True)
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| titan-")]
    assert {r[0].strip() for r in rows if r[1].strip() == "no"} == {
        r.id for r in load_runs() if r.stack == "torchtitan"}
    assert any(r[1].strip() == "yes" for r in rows)
    for r in rows:
        lacks, per_layer = float(r[4]), float(r[5])
        passes = moe_layer_microbatches(_run(r[0].strip())) if r[1].strip() == "no" else None
        if passes:
            assert per_layer == pytest.approx(1e3 * lacks / passes, abs=0.1)
