"""The measured-runs reader (sim.measured_runs): every malformed run named, fields kept as written."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.measured_runs import load_runs, resolve_run
from studies.dataset import MEASURED_RUNS, default_dataset_path

RUN = """
[[run]]
id = "{rid}"
model = "debug"
gpu = "b200"
gpus = {gpus}
cluster = "hgx-b200"
stack = "torchtitan"
release = "x"
measured_tokens_per_s_per_gpu = 100
source = "a test"
{extra}
[run.plan]
ep = 4
seq_len = 512
global_batch = 16
"""


def _write(tmp_path, text: str):
    f = tmp_path / "runs.toml"
    f.write_text(text)
    return f


def test_a_run_keeps_its_fields_and_defaults(tmp_path) -> None:
    (run,) = load_runs(_write(tmp_path, RUN.format(rid="a", gpus=8, extra="")))
    assert (run.id, run.gpus, run.measured_tokens_per_s_per_gpu, run.notes, run.baseline, run.fitted,
            run.measured_tflops_per_gpu) == ("a", 8, 100.0, "", None, False, None)
    assert run.plan == {"ep": 4, "seq_len": 512, "global_batch": 16}
    model, cluster, plan = resolve_run(run)
    assert (model.name, cluster.n_gpus, plan.ep, plan.dp_shard) == ("debug", 8, 4, 8)
    assert default_dataset_path() == MEASURED_RUNS and MEASURED_RUNS.exists()


def test_sim_reads_a_dataset_only_from_the_path_it_is_given() -> None:
    """The shipped dataset lives with the studies; sim holds no path into studies/ (issue 27 item 5)."""
    import inspect

    import sim.interval_data
    import sim.measured_runs
    import sim.uncertainty

    for module in (sim.measured_runs, sim.uncertainty, sim.interval_data):
        assert '"studies"' not in inspect.getsource(module)
    with pytest.raises(TypeError):
        load_runs()  # type: ignore[call-arg]


@pytest.mark.parametrize(("text", "needle"), [
    (RUN.format(rid="a", gpus=8, extra='oops = 1'), "run 'a': unknown key(s) oops"),
    (RUN.format(rid="a", gpus=0, extra=''), "run 'a': gpus must be a positive finite number, got 0"),
    (RUN.format(rid="a", gpus=8, extra='measured_tflops_per_gpu = -1'), "measured_tflops_per_gpu must be a positive"),
    (RUN.format(rid="a", gpus=8, extra='fitted = "yes"'), "run 'a': fitted has the wrong type"),
    (RUN.format(rid="a", gpus=8, extra='baseline = "b"'), "baseline 'b' is not a run id"),
    (RUN.format(rid="a", gpus=8, extra='') + RUN.format(rid="a", gpus=8, extra=''), "duplicate run id(s) a"),
    (RUN.format(rid="a", gpus=8, extra='').replace('source = "a test"\n', ''), "missing required key 'source'"),
    ("title = 'x'\n" + RUN.format(rid="a", gpus=8, extra=''), "unknown top-level key(s) title"),
    ("", "no [[run]] tables"),
])
def test_malformed_runs_are_named(tmp_path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_runs(_write(tmp_path, text))
    assert needle in str(err.value) and "runs.toml" in str(err.value)


def test_a_plan_that_cannot_be_derived_names_the_run(tmp_path) -> None:
    # Checked when the file is read (or, at the latest, when the plan is resolved), naming run and field.
    with pytest.raises(ConfigError, match=r"run 'odd' plan.*tp \(3\)"):
        for run in load_runs(_write(tmp_path, RUN.format(rid="odd", gpus=8, extra='').replace("ep = 4", "ep = 4\ntp = 3"))):
            resolve_run(run)
    with pytest.raises(ConfigError, match="run 'bad' plan"):
        for run in load_runs(_write(tmp_path, RUN.format(rid="bad", gpus=8, extra='').replace("ep = 4", 'ep = 4\nprecision = "fp4"'))):
            resolve_run(run)


def test_torchtitan_pr_2107s_runs_compile_the_loss_alone() -> None:
    """PR #2107's command passes ``--compile.components=model`` and then ``--compile.components=loss``; TorchTitan's
    config parses a list[str] flag as one comma-separated argument, so the last stands: the model's blocks run eager
    (``compile_model`` false), issued as an eager stack's are, while the seed's ``loss,model`` compiles them."""
    from sim.predict import predict
    from sim.stacks import load_stack

    runs = {r.id: r for r in load_runs(MEASURED_RUNS)}
    for rid, compiled in (("titan-dsv3-h100-bf16", False), ("titan-dsv3-h100-bf16-deepep", False),
                          ("titan-dsv3-b200-bf16", True)):
        model, cluster, plan = resolve_run(runs[rid])
        assert plan.compile_model is compiled, rid
        launch = predict(model, cluster, plan, stack=load_stack("torchtitan")).launch
        assert launch == ("compiled" if compiled else "eager"), rid
