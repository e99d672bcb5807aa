"""The Megatron stack fit: the stored efficiencies reproduce their named runs; the protocol holds the rest out."""

from __future__ import annotations

import pytest

from calibrate.stack_fit import fit_arch_efficiency
from calibrate.stack_fit_megatron import (
    PROTOCOL,
    format_markdown,
    megatron_runs,
    megatron_table,
    profile_for_release,
    run_specs,
)
from sim.stacks import load_stack


@pytest.fixture(scope="module")
def table():
    return megatron_table()


def test_protocol_fits_one_run_per_profile_and_arch_and_holds_out_the_rest(table) -> None:
    runs = megatron_runs()
    assert len(runs) == 13 and len(PROTOCOL) == 2
    roles = {r.id: r.role for r in table}
    assert sorted(i for i, role in roles.items() if role == "fitted") == sorted(PROTOCOL.values())
    assert sum(role == "held out" for role in roles.values()) == 11
    for (profile, arch), run_id in PROTOCOL.items():
        run = next(r for r in runs if r["id"] == run_id)
        assert profile_for_release(run["release"]) == profile
        assert run_specs(run)[1].gpu.arch == arch
        assert run_id in load_stack(profile).sources[f"efficiency.{arch}"]  # named with its run


def test_stored_efficiencies_reproduce_their_fitted_runs(table) -> None:
    for row in table:
        assert row.fits_in_memory, row.id
        if row.role == "fitted":
            assert row.error == pytest.approx(0.0, abs=2e-3), row.id


def test_refit_of_the_cheapest_run_matches_the_stored_number() -> None:
    (profile, arch), run_id = next((k, v) for k, v in PROTOCOL.items() if k == ("megatron-26.04", "sm100"))
    run = next(r for r in megatron_runs() if r["id"] == run_id)
    model, cluster, plan = run_specs(run)
    value = fit_arch_efficiency(model, cluster, plan, float(run["measured_tokens_per_s_per_gpu"]),
                                load_stack(profile), tol=1e-5)
    assert value == pytest.approx(load_stack(profile).eff(arch, "grouped_gemm"), abs=5e-4)


def test_markdown_table_lists_every_run(table) -> None:
    text = format_markdown(table)
    assert text.count("\n| mcore-") == 13 and "Held-out runs: 11" in text


@pytest.mark.parametrize("profile", sorted({p for p, _ in PROTOCOL}))
def test_one_efficiency_per_release_carried_to_every_architecture(profile) -> None:
    stack = load_stack(profile)
    (fitted_arch,) = [arch for p, arch in PROTOCOL if p == profile]
    value = stack.eff(fitted_arch, "grouped_gemm")
    for arch in ("sm90", "sm100", "sm103", "sm120"):
        for op_class in ("gemm", "grouped_gemm", "attn.fwd", "mem"):
            assert stack.eff(arch, op_class) == value, (arch, op_class)
    assert [k for k, v in stack.sources.items() if k.startswith("efficiency.") and v.startswith("FITTED")] == [
        f"efficiency.{fitted_arch}"]


def test_refit_carries_the_release_number_to_the_other_architectures() -> None:
    rows = {r.id: r for r in megatron_table({("megatron-26.04", "sm100"): 0.5})}
    stored = {r.id: r for r in megatron_table()}
    for run_id in ("mcore-26.04.01-dsv3-256xb300", "mcore-26.04.01-qwen3-30b-16xh100", "mcore-26.04-dsv3-256xb200"):
        assert rows[run_id].predicted_tokens_per_s_per_gpu < 0.9 * stored[run_id].predicted_tokens_per_s_per_gpu
    assert (rows["mcore-26.02-dsv3-256xb300"].predicted_tokens_per_s_per_gpu
            == stored["mcore-26.02-dsv3-256xb300"].predicted_tokens_per_s_per_gpu)
