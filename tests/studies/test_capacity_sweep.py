"""``moesim study capacity``: tiny sweeps end to end, kill-and-resume exactly once, bad specs exit 2, Ray."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studies.capacity import COLUMNS, read_results, run_sweep
from studies.capacity_spec import default_spec, load_spec

ROOT = Path(__file__).resolve().parents[2]
TINY_SEARCH = """
[search]
tp = [1]
pp = [1, 2]
schedules = ["1f1b"]
ep = [8]
ac = ["full"]
micro_batch = [1]
"""


def spec_file(tmp_path: Path, counts: list[int], gpus: list[str], extra: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(f"""
[capacity]
tokens = 1e11
price_per_gpu_hour = {{b200 = 5.0, "*" = 3.0}}
[[sweep]]
models = ["deepseek-v3-16b"]
gpus = {gpus!r}
gpu_counts = {counts!r}
nic_gbps = [400, 800]
seq_len = 2048
global_batch = 512
{extra}
{TINY_SEARCH}""".replace("'", '"'))
    return path


def moesim(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=env, **kw)


def test_default_sweep_has_at_least_500_points_and_passes_its_checks() -> None:
    spec = default_spec()
    points = spec.points()
    assert len(points) >= 500 and len({p.point_id for p in points}) == len(points)
    assert {p.gpu for p in points} == {"h100", "h200", "b200", "gb200", "b300", "gb300"}
    assert min(p.n_gpus for p in points) == 64 and max(p.n_gpus for p in points) == 16384
    assert {p.nvlink_domain for p in points} >= {"nvl8", "nvl72"} and {p.oversubscription for p in points} >= {1.0, 2.0}
    from studies.capacity import check_counts_fit

    check_counts_fit(spec)


def test_tiny_sweep_writes_table_and_report(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, [64, 128], ["b200", "h100"], 'precisions = ["bf16", "mxfp8"]')
    result = moesim("study", "capacity", "--spec", str(spec), "--out", str(tmp_path / "out"), "--workers", "2")
    assert result.returncode == 0, result.stderr
    rows = read_results(tmp_path / "out" / "results.csv")
    assert len(rows) == len(load_spec(spec).points()) == 16
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(float(r["tokens_per_s_per_gpu"]) > 0 and float(r["cost_usd"]) > 0 for r in ok)
    # MXFP8 does not run on Hopper: those points say why instead of a number.
    assert all(r["status"].startswith("no valid plan") for r in rows if r["gpu"] == "h100" and r["precision"] == "mxfp8")
    html = (tmp_path / "out" / "capacity-report.html").read_text()
    assert "Pareto" in html and "Cost" in html and "<script src=" not in html
    again = moesim("study", "capacity", "--spec", str(spec), "--out", str(tmp_path / "out"), "--no-report")
    assert again.returncode == 0 and len(read_results(tmp_path / "out" / "results.csv")) == 16  # nothing redone


def test_a_killed_sweep_resumes_and_ends_with_every_point_exactly_once(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, [64, 128, 256, 512], ["b200", "b300", "gb200"])
    total = len(load_spec(spec).points())
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "moesim", "study", "capacity", "--spec", str(spec), "--out",
                             str(out), "--workers", "1", "--no-report"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    table = out / "results.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if table.exists() and table.read_text().count("\n") >= 1 + 3:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(read_results(table))
    assert 3 <= before < total, f"the kill did not land midway ({before} of {total})"
    with table.open("a") as handle:  # a crash in the middle of an append leaves half a line
        handle.write("deadbeef0000,deepseek-v3-16b,b2")
    result = moesim("study", "capacity", "--spec", str(spec), "--out", str(out), "--workers", "2", "--no-report")
    assert result.returncode == 0, result.stderr
    with table.open() as handle:
        rows = list(csv.DictReader(handle))
    ids = [r["point_id"] for r in rows]
    assert sorted(ids) == sorted(p.point_id for p in load_spec(spec).points())
    assert len(ids) == len(set(ids)) == total
    assert list(rows[0]) == COLUMNS


@pytest.mark.parametrize("body, needle", [
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [64]\nbogus = 1\n", "unknown key(s) bogus"),
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [0]\n", "gpu_counts must be in 8..65536"),
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [100]\n", "not a multiple"),
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [64]\nnic_gbps = [-400]\n", "nic_gbps"),
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [64]\noversubscription = [0.5]\n",
     "oversubscription"),
    ("[[sweep]]\nmodels = ['nope']\ngpus = ['b200']\ngpu_counts = [64]\n", "unknown 'nope'"),
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = []\n", "non-empty list"),
    ("[[sweep]]\nmodels = ['kimi-k2']\ngpus = ['h100']\ngpu_counts = [8]\nprecisions = ['bf16']\n",
     "no plan of the search space fits it in memory"),
    ("[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['h100']\ngpu_counts = [64]\nprecisions = ['mxfp8']\n",
     "no plan of the search space can run (most often: plan: precision 'mxfp8')"),
    ("[capacity]\ntokens = -1\n[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [64]\n", "tokens"),
    ("[search]\ntp = [0]\n[[sweep]]\nmodels = ['deepseek-v3-16b']\ngpus = ['b200']\ngpu_counts = [64]\n", "tp"),
    ("[nonsense]\n", "unknown table(s) nonsense"),
    ("[[sweep]\n", "malformed TOML"),
])
def test_a_bad_spec_exits_2_with_one_message(tmp_path: Path, body: str, needle: str) -> None:
    (tmp_path / "bad.toml").write_text(body)
    result = moesim("study", "capacity", "--spec", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_ray_executor_on_a_local_ray_instance(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the optional ray extra is not installed (pip install '.[ray]')")
    spec = spec_file(tmp_path, [64, 128], ["b200"])
    run_sweep(load_spec(spec), tmp_path / "ray", workers=2, executor="ray")
    run_sweep(load_spec(spec), tmp_path / "proc", workers=1)
    ray_rows = {r["point_id"]: r for r in read_results(tmp_path / "ray" / "results.csv")}
    proc_rows = {r["point_id"]: r for r in read_results(tmp_path / "proc" / "results.csv")}
    assert len(ray_rows) == 4 and ray_rows.keys() == proc_rows.keys()
    for key, row in ray_rows.items():
        assert row["tokens_per_s_per_gpu"] == proc_rows[key]["tokens_per_s_per_gpu"]
