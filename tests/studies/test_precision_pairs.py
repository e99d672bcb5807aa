"""Held-out precision pairs (studies/data/precision_pairs.toml): MXFP8's gain over a whole TorchTitan step, and the
file's strictness."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sim.errors import ConfigError
from studies.precision_pairs import (
    FITTED_PAIR,
    default_path,
    load_pairs,
    main,
    pair_markdown,
    pair_rows,
)


def test_the_held_out_pair_of_the_stack_profiles_era_is_predicted_within_five_percent() -> None:
    """The Llama4 Scout step on 256 GB200 (torchao 0.17, as the stack profile): MXFP8's measured +30.2%."""
    row = next(r for r in pair_rows() if "blog" in r.id)
    assert row.measured == pytest.approx(1.302)
    assert abs(row.error) < 0.05, row


def test_the_fitted_pair_is_the_seeds_deepep_runs_measured_ratio() -> None:
    rows = pair_rows(load_pairs()[:1], with_fitted=True)
    assert rows[0].fitted and rows[0].id == " -> ".join(FITTED_PAIR)
    assert rows[0].measured == pytest.approx(918 / 859)
    assert rows[0].change == "bf16 -> mxfp8-grouped" and not rows[1].fitted


def test_a_cut_model_is_predicted_with_its_own_layer_count() -> None:
    two = next(p for p in load_pairs() if p.n_layers == 2)
    row = pair_rows([two])[0]
    full = pair_rows([dataclasses.replace(two, n_layers=None, id="full")])[0]
    assert row.model.endswith("(2 layers)") and row.predicted != pytest.approx(full.predicted, rel=1e-3)


def test_the_transfer_section_lists_every_pair() -> None:
    text = "\n".join(pair_markdown())
    assert all(p.id in text for p in load_pairs()) and FITTED_PAIR[0] in text


def _write(tmp_path: Path, old: str, new: str) -> Path:
    bad = tmp_path / "pairs.toml"
    text = default_path().read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    return bad


@pytest.mark.parametrize(("old", "new", "message"), [
    ("measured_speedup = 1.302", "measured_speedup = 1.302\nspeedup_kind = 'e2e'", "unknown key.*speedup_kind"),
    ("measured_speedup = 1.302", "measured_speedup = -1.3", "measured_speedup must be a positive ratio"),
    ('precision = "mxfp8"\nmeasured_speedup = 1.302', 'precision = "bf16"\nmeasured_speedup = 1.302', "is the plan's own"),
    ('precision = "mxfp8"\nmeasured_speedup = 1.302', 'precision = "fp4"\nmeasured_speedup = 1.302', "precision must be one of"),
    ("ep = 16\nseq_len = 8192\nglobal_batch = 256\nmicro_batch = 1\nac = \"full\"",
     "ep = 16\nseq_len = 8192\nglobal_batch = 256\nmicro_batch = 1\nac = \"sometimes\"", "pair 'torchao-blog.*ac"),
    ("gpus = 256", "gpus = '256'", "gpus must be int"),
])
def test_a_bad_field_is_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_pairs(_write(tmp_path, old, new))


def test_a_duplicate_id_is_refused(tmp_path: Path) -> None:
    bad = _write(tmp_path, 'id = "torchao-readme-llama4-scout-gb200-mxfp8-noac"',
                 'id = "torchao-blog-llama4-scout-256xgb200-mxfp8-fullac"')
    with pytest.raises(ConfigError, match="duplicate pair id"):
        load_pairs(bad)


def test_the_command_exits_2_on_a_bad_file_without_a_traceback(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "gpus = 256", "gpus = 0")
    assert main(["--pairs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "gpus must be positive" in err and "Traceback" not in err
