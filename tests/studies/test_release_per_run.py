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
