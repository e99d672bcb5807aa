"""The file-surface fuzzer (``benchmarks/fuzz_files.py``) on a small seeded count: every surface exercised,
0 tracebacks, 0 hangs, 0 wrong exit codes, 0 partial outputs (issue 16, Must-show 2).

The full run is ``python benchmarks/fuzz_files.py --inputs 2000 --seed 0``; this one runs 20 inputs per surface
in this process, and checks that the fuzzer's seeds are valid and its verdicts strict.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_files", ROOT / "benchmarks" / "fuzz_files.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_files"] = module
    spec.loader.exec_module(module)
    return module


fuzz_files = _load()


def test_small_seeded_fuzz_has_no_failures() -> None:
    summary = fuzz_files.fuzz(20 * len(fuzz_files.SURFACES), seed=0, timeout_s=60.0, subprocess_fraction=0.0)
    assert set(summary.surfaces) == set(fuzz_files.SURFACES)
    for name, stats in summary.surfaces.items():
        assert stats.inputs == 20, name
        assert stats.accepted + stats.rejected + stats.failures == stats.inputs, name
    assert summary.totals.accepted > 0 and summary.totals.rejected > 0
    assert not summary.failures, "\n".join(f"#{f.index} {f.surface} ({f.mutation}): {f.reason}; moesim "
                                           f"{' '.join(f.argv)}" for f in summary.failures)


@pytest.mark.parametrize("surface", fuzz_files.SURFACES)
def test_every_seed_file_is_accepted(surface: str, tmp_path: Path) -> None:
    """Each unmutated seed is a valid input: its command exits 0 with complete outputs (else the fuzz would
    only ever test rejection)."""
    seeds = fuzz_files.build_seeds()[surface]
    accepted = 0
    for n, seed in enumerate(seeds):
        work = tmp_path / f"{n}"
        folder = work / "in" / ("model" if seed.filename == "config.json" else "")
        folder.mkdir(parents=True)
        (work / "out").mkdir()
        raw = fuzz_files.serialise(seed, seed.data)
        path = folder / seed.filename
        path.write_bytes(gzip.compress(raw) if seed.gz else raw)
        inv = fuzz_files.COMMANDS[surface](path, random.Random(n), work)
        verdict, reason = fuzz_files.classify(fuzz_files.run_in_process(inv.argv, 60.0), inv, work)
        assert verdict != "failure", (seed.label, inv.argv, reason)
        accepted += verdict == "accepted"
    assert accepted, f"no seed of {surface} was accepted"


def test_verdicts_are_strict(tmp_path: Path) -> None:
    """A second stderr line, output left behind after exit 2, and an exit code other than 0/2 are failures."""
    out = tmp_path / "o.json"
    inv = fuzz_files.Invocation(["x"], outputs=[out])
    two_lines = fuzz_files.RunOutcome(2, "", "moesim: error: a\nmore\n")
    assert fuzz_files.classify(two_lines, inv, tmp_path)[0] == "failure"
    assert fuzz_files.classify(fuzz_files.RunOutcome(2, "", "moesim: error: bad\n"), inv, tmp_path)[0] == "rejected"
    out.write_text("{")
    assert fuzz_files.classify(fuzz_files.RunOutcome(2, "", "moesim: error: bad\n"), inv, tmp_path)[0] == "failure"
    assert fuzz_files.classify(fuzz_files.RunOutcome(70, "", "moesim: internal error\n"), inv, tmp_path)[0] == "failure"
    assert fuzz_files.classify(fuzz_files.RunOutcome(None, "", "", timed_out=True), inv, tmp_path)[0] == "failure"
    checked = fuzz_files.Invocation(["x"], check=lambda s: fuzz_files._check_predictions(s, True))
    nan = json.dumps({"predictions": [{"tokens_per_s_per_gpu": float("nan"), "step_time_s": 1.0}]})
    assert fuzz_files.classify(fuzz_files.RunOutcome(0, nan, ""), checked, tmp_path)[0] == "failure"


def test_mutations_are_seeded() -> None:
    seed = fuzz_files.build_seeds()["scenario"][1]
    first = [fuzz_files.make_input(random.Random(f"s{i}"), seed) for i in range(20)]
    again = [fuzz_files.make_input(random.Random(f"s{i}"), seed) for i in range(20)]
    assert first == again
    assert len({blob for blob, _ in first}) > 10
