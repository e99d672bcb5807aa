"""Random plausible plans through ``moesim predict`` (hypothesis, fixed seed): exit 0 with finite numbers, or
exit 2 with one line; never a traceback or an internal error. The larger run, with two ``PYTHONHASHSEED``s
compared byte for byte, is ``python benchmarks/random_plans.py --plans 1000``.

``MOESIM_RANDOM_PLANS`` sets the example count (default 150 keeps this under a minute on a 2-core machine;
1,000 and more run with ``MOESIM_RANDOM_PLANS=1000``).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.robustness.cli import run_cli
from tests.robustness.plan_space import random_argv

EXAMPLES = int(os.environ.get("MOESIM_RANDOM_PLANS", "150"))


@seed(16)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32 - 1))
def test_random_plans_predict_or_exit_2(capsys: pytest.CaptureFixture[str], draw: int) -> None:
    argv = ["predict", *random_argv(random.Random(draw))]
    code, out, err = run_cli(argv, capsys)
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and not out.strip(), (argv, err)
        return
    for pred in json.loads(out)["predictions"]:
        assert math.isfinite(pred["step_time_s"]) and pred["step_time_s"] > 0, argv
        assert 0 < pred["mfu"] < 1, (argv, pred["mfu"])


def test_the_plans_of_issue_16_predict(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """DeepEP low-latency on 160-SM GPUs with 160 experts: its kernels hold every SM (not an internal error).
    No built-in stack runs DeepEP-LL in training, so the plans run under a user stack that adds it."""
    stack = tmp_path / "ll.toml"
    stack.write_text('[stack]\nbase = "deepseek"\nname = "deepseek-ll"\nep_backends = ["deepep", "deepep-ll"]\n'
                     'precisions = ["bf16", "fp8-blockwise"]\n')
    for argv in (
        "predict --model deepseek-v2-236b --cluster hgx-b300 --gpu gb300 --gpus 16 --tp 1 --pp 4 --pp-schedule "
        "dualpipev --ep 2 --cp 2 --dp-shard 2 --seq-len 2048 --micro-batch 2 --global-batch 32 --ac full "
        f"--precision fp8-blockwise --ep-backend deepep-ll --deepep-sms 32 --stack {stack} --json",
        "predict --model deepseek-v2-236b --gpus 64 --gpu b300 --pp 8 --ep 2 --pp-schedule dualpipe "
        f"--ep-backend deepep-ll --stack {stack} --json",
    ):
        code, out, err = run_cli(argv.split(), capsys)
        assert code == 0, err
        assert json.loads(out)["predictions"][0]["tokens_per_s_per_gpu"] > 0
