"""Fit the Megatron stack profiles' kernel efficiencies to the measured Megatron-Bridge runs, and tabulate.

The protocol (docs/stack-protocol.md): ONE number per profile (framework release), fitted on one
architecture to ONE named measured run by :func:`calibrate.stack_fit.fit_arch_efficiency` (bisection on
``efficiency[arch]["default"]``) and carried to every other architecture (``efficiency["*"]``); every
other Megatron run in ``studies/data/measured_runs.toml``, on every architecture, is held out and
predicted. :data:`PROTOCOL` names the fitted runs; :func:`fit_megatron` refits them;
:func:`megatron_table` returns one row per Megatron run (predicted vs measured, fitted or held out) with
the profiles as stored (or as given). ``python -m calibrate.stack_fit_megatron`` prints both.

>>> PROTOCOL[("megatron-26.04", "sm100")]
'mcore-26.04-dsv3-256xb200'
>>> profile_for_release("megatron-bridge 26.04.01")
'megatron-26.04'
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from calibrate.stack_fit import fit_arch_efficiency, with_arch_efficiency
from sim.catalog import load_cluster, load_model
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.predict import predict
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile, load_stack, profile_for

__all__ = ["PROTOCOL", "RunRow", "profile_for_release", "megatron_runs", "run_specs", "fit_megatron",
           "megatron_table", "format_markdown", "main"]

#: (profile, arch) -> the one measured run the release's efficiency is fitted to, on that one architecture
#: (the value is carried to every other one as ``efficiency["*"]``). Every other run is held out.
PROTOCOL: dict[tuple[str, str], str] = {
    ("megatron-26.02", "sm100"): "mcore-26.02-dsv3-256xb200",
    ("megatron-26.04", "sm100"): "mcore-26.04-dsv3-256xb200",
}


@dataclass(frozen=True)
class RunRow:
    """One measured Megatron run: its profile and architecture, fitted or held out, predicted vs measured."""

    id: str
    profile: str
    arch: str
    role: str
    predicted_tokens_per_s_per_gpu: float
    measured_tokens_per_s_per_gpu: float
    fits_in_memory: bool

    @property
    def error(self) -> float:
        """Relative error (positive: predicted too fast)."""
        return self.predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu - 1

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error}


def profile_for_release(release: str) -> str:
    """The stack profile of a Megatron-Bridge release string (26.04.01 is a point release of 26.04)."""
    name = profile_for("megatron", release)
    if name == "megatron":
        raise ValueError(f"no Megatron profile for release {release!r}")
    return name


def megatron_runs(path: str | None = None) -> list[dict[str, Any]]:
    """The ``stack = "megatron"`` runs of the measured-runs dataset (the shipped one by default)."""
    if path is None:
        text = resources.files("studies").joinpath("data/measured_runs.toml").read_text(encoding="utf-8")
    else:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    return [r for r in tomllib.loads(text)["run"] if r.get("stack") == "megatron"]


def run_specs(run: Mapping[str, Any]) -> tuple[ModelSpec, ClusterSpec, ParallelPlan]:
    """(model, cluster, plan) of one dataset run."""
    plan = plan_from_mapping(derive_plan_fields(dict(run["plan"]), run["gpus"]), f"run {run['id']!r}")
    return load_model(run["model"]), load_cluster(run["cluster"], n_gpus=run["gpus"]), plan


def fit_megatron(runs: Sequence[Mapping[str, Any]] | None = None) -> dict[tuple[str, str], float]:
    """Refit every (profile, arch) efficiency of :data:`PROTOCOL` on its named run."""
    by_id = {r["id"]: r for r in (runs if runs is not None else megatron_runs())}
    out: dict[tuple[str, str], float] = {}
    for (profile, arch), run_id in PROTOCOL.items():
        run = by_id[run_id]
        model, cluster, plan = run_specs(run)
        assert cluster.gpu.arch == arch, (run_id, cluster.gpu.arch, arch)
        out[(profile, arch)] = fit_arch_efficiency(model, cluster, plan, float(run["measured_tokens_per_s_per_gpu"]),
                                                   load_stack(profile))
    return out


def megatron_table(fitted: Mapping[tuple[str, str], float] | None = None,
                   runs: Sequence[Mapping[str, Any]] | None = None) -> list[RunRow]:
    """Predicted vs measured for every Megatron run, with the stored profiles or ``fitted`` efficiencies."""
    fitted_ids = set(PROTOCOL.values())
    rows = []
    for run in runs if runs is not None else megatron_runs():
        model, cluster, plan = run_specs(run)
        profile = profile_for_release(run["release"])
        stack: StackProfile = load_stack(profile)
        arch = cluster.gpu.arch
        fitted_here = [v for (name, _), v in (fitted or {}).items() if name == profile]
        if fitted_here:  # the release's one number, on its fitted architecture and carried to the others
            stack = with_arch_efficiency(with_arch_efficiency(stack, "*", fitted_here[0]), arch, fitted_here[0])
        p = predict(model, cluster, plan, stack=stack)
        rows.append(RunRow(run["id"], profile, arch, "fitted" if run["id"] in fitted_ids else "held out",
                           p.tokens_per_s_per_gpu, float(run["measured_tokens_per_s_per_gpu"]), p.fits_in_memory))
    return rows


def format_markdown(rows: Sequence[RunRow]) -> str:
    """The rows as a Markdown table with the held-out runs' mean absolute error."""
    lines = ["| run | profile | arch | role | predicted tok/s/GPU | measured | error |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.id} | {r.profile} | {r.arch} | {r.role} | {r.predicted_tokens_per_s_per_gpu:.0f} | "
                     f"{r.measured_tokens_per_s_per_gpu:.0f} | {r.error * 100:+.1f}% |")
    held = [abs(r.error) for r in rows if r.role == "held out"]
    if held:
        lines.append("")
        lines.append(f"Held-out runs: {len(held)}, mean |error| {sum(held) / len(held) * 100:.1f}%, "
                     f"max {max(held) * 100:.1f}%.")
    return "\n".join(lines)


def main() -> None:
    fitted = fit_megatron()
    for (profile, arch), value in fitted.items():
        print(f"{profile:15s} {arch:6s} efficiency {value:.4f}  (fitted on {PROTOCOL[(profile, arch)]})")
    print()
    print(format_markdown(megatron_table(fitted)))


if __name__ == "__main__":
    main()
