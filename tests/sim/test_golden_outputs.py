"""Every number the simulator's outputs hold, for a matrix of plans beyond the measured runs, is as pinned in
``tests/data/golden_outputs.json`` (``tests/golden_outputs.py``: the cases, and ``--write`` to regenerate)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import golden_outputs as golden


@pytest.fixture(scope="module")
def stored() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(golden.GOLDEN_FILE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def today() -> dict[str, Any]:
    return golden.sim_outputs()


def test_every_case_is_stored_and_none_is_extra(stored: dict[str, Any], today: dict[str, Any]) -> None:
    sim_cases = {k for k in stored if not k.startswith(("calibrate:", "compare:"))}
    assert sim_cases == set(today), "cases changed: run `python tests/golden_outputs.py --write`"


@pytest.mark.parametrize("case", [c[0] for c in golden.PREDICTION_CASES] + [c[0] for c in golden.LAYER_CASES])
def test_the_case_gives_the_stored_numbers(case: str, stored: dict[str, Any], today: dict[str, Any]) -> None:
    diffs = list(golden.differences(stored[case], today[case], case))
    assert not diffs, "outputs moved (if meant: `python tests/golden_outputs.py --write`, review the diff):\n" + \
        "\n".join(diffs[:20])


@pytest.mark.parametrize("case", ["inputs:models", "inputs:gpus", "inputs:clusters", "inputs:stacks"]
                         + [f"calibration:{c[0]}" for c in golden.CALIBRATION_CASES])
def test_the_built_in_inputs_parse_to_the_stored_values(case: str, stored: dict[str, Any],
                                                        today: dict[str, Any]) -> None:
    diffs = list(golden.differences(stored[case], today[case], case))
    assert not diffs, "inputs moved (if meant: `python tests/golden_outputs.py --write`):\n" + "\n".join(diffs[:20])


@pytest.mark.parametrize("case", golden.WORKLOAD_CASES)
def test_the_cases_op_lists_are_the_stored_ones(case: str, stored: dict[str, Any], today: dict[str, Any]) -> None:
    name = f"workload:{case}"
    diffs = list(golden.differences(stored[name], today[name], name))
    assert not diffs, "op lists moved (if meant: `python tests/golden_outputs.py --write`):\n" + "\n".join(diffs[:20])


@pytest.mark.parametrize("surface", list(golden.error_surfaces()))
def test_every_one_field_corruption_of_an_input_gives_the_stored_answer(surface: str, stored: dict[str, Any],
                                                                         today: dict[str, Any]) -> None:
    """A wrong, missing or out-of-range field is accepted or refused exactly as stored, with the stored message;
    none raises anything but a user error (``golden._outcome`` lets any other exception through)."""
    name = f"errors:{surface}"
    diffs = list(golden.differences(stored[name], today[name], name))
    assert not diffs, "answers moved (if meant: `python tests/golden_outputs.py --write`):\n" + "\n".join(diffs[:20])


def test_a_refusal_names_its_owner_and_a_numeric_field_in_the_files_own_units(today: dict[str, Any]) -> None:
    for surface in golden.error_surfaces():
        refused = {label: msg for label, msg in today[f"errors:{surface}"].items() if msg != "ok"}
        assert refused, surface
        owner = "plan" if surface == "plan" else "golden"
        assert all(owner in msg for msg in refused.values()), surface
    gpu = today["errors:gpu:b200"]
    assert gpu["/bf16_tflops: negative"] == "ConfigError: gpu 'golden': bf16_tflops must be at least 0.001, got -1"
    assert "bf16_flops" not in " ".join(gpu.values())  # the SI field is never shown for a human-unit key


def test_every_bound_is_stored_and_below_its_prediction(stored: dict[str, Any], today: dict[str, Any]) -> None:
    bounds = {k: v for k, v in today.items() if k.startswith("bound:")}
    assert len(bounds) >= 6
    for name, value in bounds.items():
        assert not list(golden.differences(stored[name], value, name))
        assert value["step_lower_bound_s"] <= today[name.removeprefix("bound:")]["step_time_s"] * (1 + 1e-12)


def test_the_matrix_spans_every_value_of_the_plan_fields_a_user_picks() -> None:
    seen: dict[str, set[Any]] = {}
    for *_, fields in golden.PREDICTION_CASES:
        for key, value in fields.items():
            seen.setdefault(key, set()).add(value)
    assert seen["ep_backend"] >= {"deepep", "deepep-ll", "hybridep"}  # nccl: the default
    assert seen["pp_schedule"] >= {"interleaved-1f1b", "dualpipe", "dualpipev"}
    assert seen["precision"] >= {"mxfp8", "mxfp8-grouped", "fp8-blockwise", "fp8-current"}
    assert seen["ac"] >= {"none", "selective"} and seen["cuda_graphs"] == {"none", "partial", "full"}
    assert {s for *_, s, _f in golden.PREDICTION_CASES} == {"torchtitan", "megatron", "megatron-26.02",
                                                             "megatron-26.04", "deepseek"}


def test_a_moved_number_is_named_with_its_case_and_field() -> None:
    stored = {"a": {"step_time_s": 1.0, "parts": {"x": 0.5}, "label": "compute", "n": 3}}
    same = {"a": {"step_time_s": 1.0 + 1e-12, "parts": {"x": 0.5}, "label": "compute", "n": 3}}
    assert not list(golden.differences(stored, same))
    moved = {"a": {"step_time_s": 1.0 + 1e-6, "parts": {"y": 0.5}, "label": "comm", "n": 3}}
    assert list(golden.differences(stored, moved)) == [
        "/a/label: 'compute' -> 'comm'", "/a/parts/x: gone", "/a/parts/y: added",
        "/a/step_time_s: 1.0 -> 1.000001"]
    assert list(golden.differences([1, 2], [1])) == [": 2 items -> 1"]
    assert list(golden.differences(True, 1.0)) == []  # bool True == 1.0 (JSON keeps the bool)
