"""Inputs a CLI fuzzing campaign (2,960 invocations, 2026-12-07) found breaking the input rules: an internal error
(exit 70), a hang, a results table left broken by a failed run, a message on several lines or naming no file, an empty
value taken for "not given". Each is pinned here: one line on stderr naming the field, exit 2 (or the command's
documented answer), nothing written."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.errors import ConfigError
from studies.capacity import COLUMNS, _prepare_table, read_results

SPEC = """
[capacity]
tokens = 1e12
[[sweep]]
models = ["deepseek-v3-16b"]
gpus = ["h100"]
gpu_counts = [64]
precisions = ["bf16"]
"""
HEADER = ",".join(COLUMNS) + "\n"


def moesim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    for needle in needles:
        assert needle in message, message
    return message


def a_row(**values: str) -> str:
    row = {c: "" for c in COLUMNS} | {"point_id": "p1", "model": "deepseek-v3-16b", "gpu": "h100", "n_gpus": "64",
                                      "status": "ok", "seq_len": "4096", "global_batch": "512", "tp": "1", "pp": "1",
                                      "pp_schedule": "1f1b", "vpp": "1", "ep": "8", "ac": "full", "micro_batch": "1",
                                      "tokens_per_s_per_gpu": "1000.5", "step_time_s": "2.0", "mfu": "0.3",
                                      "time_to_train_days": "1.5"} | values
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([row[c] for c in COLUMNS])
    return buf.getvalue()


@pytest.mark.parametrize("content, needle", [
    (b"\x00\xff\xfe", "not UTF-8"),
    ((HEADER + a_row(tokens_per_s_per_gpu="abc")).encode(), "line 2: tokens_per_s_per_gpu must be a number, got 'abc'"),
    ((HEADER + a_row(tp="1.5")).encode(), "line 2: tp must be a whole number"),
    ((HEADER + a_row(tp="")).encode(), "status ok) has no tp"),
    ((HEADER + "p1,x\n").encode(), "line 2: 35 columns expected"),
])
def test_a_corrupt_results_table_is_named_not_crashed(tmp_path: Path, content: bytes, needle: str) -> None:
    table = tmp_path / "results.csv"
    table.write_bytes(content)
    with pytest.raises(ConfigError, match="results.csv") as err:
        _prepare_table(table, {"p1"})
    assert needle.replace("35", str(len(COLUMNS))) in str(err.value)
    assert table.read_bytes() == content  # refused before anything is written to it


def test_a_cut_header_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    table = tmp_path / "results.csv"
    table.write_text(HEADER[:120])  # a header cut short, no newline: the old tail repair emptied the file
    with pytest.raises(ConfigError, match="columns differ"):
        _prepare_table(table, {"p1"})
    assert table.read_text() == HEADER[:120]


def test_a_partial_last_row_is_still_repaired(tmp_path: Path) -> None:
    table = tmp_path / "results.csv"
    table.write_text(HEADER + a_row() + "p2,deepseek")  # a crash mid-append
    assert _prepare_table(table, {"p1", "p2"}) == {"p1"}
    assert table.read_text() == HEADER + a_row()
    assert [r["point_id"] for r in read_results(table)] == ["p1"]


def test_a_foreign_point_id_is_quoted_on_one_line(tmp_path: Path) -> None:
    table = tmp_path / "results.csv"
    table.write_text(HEADER + a_row(point_id="odd\nid"))  # csv quotes a newline inside a field
    with pytest.raises(ConfigError) as err:
        _prepare_table(table, {"p1"})
    assert "\n" not in str(err.value) and "'odd\\nid'" in str(err.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_or_device_in_place_of_the_table_is_refused_without_reading(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "results.csv")  # reading it would block for ever
    with pytest.raises(ConfigError, match="not a regular file"):
        _prepare_table(tmp_path / "results.csv", {"p1"})
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "results.csv").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="not a regular file"):
        _prepare_table(tmp_path / "dev" / "results.csv", {"p1"})


def test_capacity_refuses_a_report_path_it_cannot_write_before_the_sweep(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "out" / "capacity-report.html").mkdir(parents=True)
    result = moesim("study", "capacity", "--spec", str(tmp_path / "spec.toml"), "--out", str(tmp_path / "out"),
                    "--workers", "1")
    one_line_error(result, "capacity-report.html: not a regular file")
    assert not (tmp_path / "out" / "results.csv").exists()  # nothing ran, nothing written


@pytest.mark.parametrize("args", [
    ("study", "capacity", "--out", ""),
    ("predict", "--cluster", ""),
    ("predict", "--calibration", " "),
    ("predict", "--trace", ""),
    ("predict", "--scenario", ""),
    ("calibrate", "fit", "x.json", "--out", ""),
])
def test_an_empty_value_is_refused_not_taken_for_the_default(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = moesim(*args, cwd=tmp_path)
    one_line_error(result, "empty value")
    assert list(tmp_path.iterdir()) == []  # `--out ''` wrote into the working folder


def test_plan_with_a_vanishing_deadline_answers_instead_of_crashing() -> None:
    result = moesim("plan", "--model", "deepseek-v3-16b", "--tokens", "1e12", "--days", "1e-300", "--gpu", "h100",
                    "--no-progress", "--workers", "1")
    assert result.returncode == 1, result.stderr  # the documented negative answer, on stdout
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "no cluster of" in result.stdout


def test_a_trace_with_absurd_durations_is_refused(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": "aten::mm", "cat": "kernel", "ts": 0, "dur": 1e300}]
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    result = moesim("calibrate", "fit", str(path), "--out", str(tmp_path / "c.json"), "--gpu", "h800")
    one_line_error(result, "traceEvents[0]", "longer than a year")
    assert not (tmp_path / "c.json").exists()


def test_routing_counts_near_the_float_limit_are_relative_counts(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("1e308\n" * 64)
    (tmp_path / "one.txt").write_text("1\n" * 64)
    common = ("predict", "--model", "deepseek-v3-16b", "--gpu", "h100", "--gpus", "64", "--ep", "8", "--json")
    big, one = (moesim(*common, "--routing", str(tmp_path / name)) for name in ("big.txt", "one.txt"))
    assert big.returncode == 0 and "overflow" not in big.stderr, big.stderr
    step = [json.loads(r.stdout)["predictions"][0]["step_time_s"] for r in (big, one)]
    assert step[0] == step[1]


def test_reference_usage_errors_are_one_line() -> None:
    for value in ("1e30", "abc"):
        result = moesim("reference", "--tokens", value)
        one_line_error(result, "--tokens", value)


def test_a_cluster_file_names_its_own_keys_and_has_its_count_checked(tmp_path: Path) -> None:
    base = 'gpu = "h100"\ngpus_per_node = 8\nnvlink_domain_gpus = 8\nnics_per_gpu = 1\nnic_gbps = 400\n'
    (tmp_path / "bogus.toml").write_text(base + "n_gpus = 64\nbogus = 3\n")
    (tmp_path / "count.toml").write_text(base + 'n_gpus = "x"\n')
    common = ("predict", "--model", "deepseek-v3-16b", "--gpus", "64", "--ep", "8", "--cluster")
    message = one_line_error(moesim(*common, str(tmp_path / "bogus.toml")), "unknown key(s) bogus")
    assert "nic_gbps" in message and "nic_bw_bytes_per_s" not in message
    one_line_error(moesim(*common, str(tmp_path / "count.toml")), "n_gpus", "'x'")


def test_trace_microbatches_without_a_trace_is_refused_not_ignored() -> None:
    one_line_error(moesim("predict", "--trace-microbatches", "0,1"), "--trace-microbatches", "--trace FILE")


# --- the second campaign (3,964 invocations over the framework-config, compare, scenario, runs and stack files) ---

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def titan_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (EXAMPLES / "torchtitan-dsv3-671b.toml").read_text()
    assert old in text
    path = tmp_path / "job.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new, needle", [
    ('name = "deepseek_v3"', "name = [1, 2]", "model.name = [1, 2]: must be a string"),
    ('pipeline_parallel_schedule = "Interleaved1F1B"', "pipeline_parallel_schedule = []",
     "pipeline_parallel_schedule = []: must be a string"),
    ("tensor_parallel_degree = 2", "tensor_parallel_degree = {a = 1}", "tensor_parallel_degree = '{...}': must be a "
     "value, not a table"),
    ("\nconverters = []", "\nconverters = true", "model.converters = True: must be a list of names"),
])
def test_a_torchtitan_job_of_wrong_types_is_refused(tmp_path: Path, old: str, new: str, needle: str) -> None:
    result = moesim("predict", "--from-torchtitan", str(titan_with(tmp_path, old, new)), "--gpu", "b200",
                    "--gpus", "256")
    one_line_error(result, needle)


def megatron_yaml(tmp_path: Path, prefix: str = "", suffix: str = "") -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(prefix + (EXAMPLES / "megatron-dsv3-gb200.yaml").read_text() + suffix)
    return path


@pytest.mark.parametrize("prefix, suffix, needle", [
    ("a0: &a0 [" + ", ".join(["lol"] * 10) + "]\n"
     + "".join(f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]\n" for n in range(1, 10)), "",
     "holds more than 1,000,000 values"),  # "billion laughs": small on disk, it expands without end
    ("a: &a\n  b: *a\n", "", "a value contains itself"),
    ("", "x: " + "{a: " * 900 + "1" + "}" * 900 + "\n", "nested deeper than 64 levels"),
])
def test_a_yaml_recipe_that_expands_without_end_is_refused_at_once(tmp_path: Path, prefix: str, suffix: str,
                                                                   needle: str) -> None:
    result = moesim("predict", "--from-megatron", str(megatron_yaml(tmp_path, prefix, suffix)), "--gpu", "gb200",
                    "--gpus", "256")
    one_line_error(result, needle)


def test_a_megatron_fp8_recipe_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    text = (EXAMPLES / "megatron-dsv3-gb200.yaml").read_text().replace("mixed_precision: bf16_with_mxfp8_mixed",
                                                                       "mixed_precision: [1, 2]")
    (tmp_path / "r.yaml").write_text(text)
    one_line_error(moesim("predict", "--from-megatron", str(tmp_path / "r.yaml"), "--gpu", "gb200", "--gpus", "256"),
                   "mixed_precision = [1, 2]: must be a recipe name")


def test_a_megabyte_argument_word_is_refused_not_split_for_minutes(tmp_path: Path) -> None:
    (tmp_path / "a.args").write_text('--tensor-model-parallel-size 2 --junk "' + "x" * 2_000_000 + '"\n')
    one_line_error(moesim("predict", "--from-megatron", str(tmp_path / "a.args"), "--gpu", "gb200", "--gpus", "256"),
                   "an argument list of 2,000,0")


def test_a_stack_file_cannot_name_itself_as_its_base(tmp_path: Path) -> None:
    path = tmp_path / "self.toml"
    path.write_text(f'[stack]\nbase = "{path}"\n')
    one_line_error(moesim("predict", "--model", "deepseek-v3-16b", "--gpu", "h100", "--gpus", "16", "--ep", "8",
                          "--stack", str(path)), "base must be the name of a built-in stack")


def test_a_stack_time_field_past_any_framework_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('[stack]\nbase = "torchtitan"\nhost_sync_s = 1e18\n')
    one_line_error(moesim("predict", "--model", "deepseek-v3-16b", "--gpu", "h100", "--gpus", "16", "--ep", "8",
                          "--stack", str(tmp_path / "s.toml")), "host_sync_s must be a number in [0, 1]")


def test_a_scenario_gpu_is_checked_against_the_catalog_and_its_cluster(tmp_path: Path) -> None:
    seed = (Path(__file__).resolve().parents[2] / "sim" / "scenarios" / "dsv3-671b-b200.toml").read_text()
    for gpu, needle in (("x", "unknown gpu 'x'"), ("h100", "is not cluster 'hgx-b200''s GPU (b200)")):
        (tmp_path / "s.toml").write_text(seed.replace("gpus = 256", f'gpus = 256\ngpu = "{gpu}"', 1))
        one_line_error(moesim("predict", "--scenario", str(tmp_path / "s.toml")), needle)


def test_compare_bounds_its_variants(tmp_path: Path) -> None:
    text = (EXAMPLES / "seed-deepep-mxfp8.toml").read_text()
    head = text[: text.index("[[variant]]")]
    (tmp_path / "c.toml").write_text(head + "".join(f'[[variant]]\nname = "v{i}"\n' for i in range(300)))
    one_line_error(moesim("compare", str(tmp_path / "c.toml")), "300 [[variant]] tables; at most 256")


def test_empty_import_paths_are_refused(tmp_path: Path) -> None:
    for option in ("--from-torchtitan", "--from-megatron"):
        one_line_error(moesim("predict", option, "", cwd=tmp_path), "empty value")
    one_line_error(moesim("validate", "--threshold", "", cwd=tmp_path), "empty value")
