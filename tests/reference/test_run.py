"""The runner: torchrun with 2 gloo ranks writes named-range traces; bad input exits 2 cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference.names import REFERENCE_OPS
from reference.run import main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1", "PYTHONPATH": str(ROOT)}
EXPECTED_RANGES = {
    "attn.norm", "attn.q_proj", "attn.kv_proj", "attn.core", "attn.o_proj", "moe.norm", "moe.router",
    "moe.permute", "a2a.count_exchange", "a2a.host_sync", "moe.dispatch", "moe.expert_gemm",
    "moe.expert_gemm.gate_up", "moe.expert_gemm.down", "moe.unpermute", "moe.combine", "moe.shared_expert",
}


def _ranges(trace: Path) -> set[str]:
    events = json.loads(trace.read_text())["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "user_annotation" and "." in e["name"]}


def test_reference_names_are_the_simulator_vocabulary() -> None:
    from sim.ops import ALL_OPS

    assert set(REFERENCE_OPS) <= set(ALL_OPS)


def test_torchrun_two_ranks_mxfp8_all_to_all(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "reference.run",
           "--model", "debug", "--dispatch", "all_to_all", "--precision", "mxfp8",
           "--tokens", "128", "--seq-len", "64", "--steps", "2", "--profile", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "trace_rank0.json", "trace_rank1.json"]
    assert not Path(f"{out}.partial").exists()
    for rank in (0, 1):
        found = _ranges(out / f"trace_rank{rank}.json")
        assert EXPECTED_RANGES <= found, EXPECTED_RANGES - found
        assert found <= set(REFERENCE_OPS)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["process_group"] == "gloo"
    assert meta["backends"]["gemm"] == {"precision": "mxfp8", "kernel": "torchao-mxfp8-emulated",
                                        "emulated": True, "alignment": 32, "activation_dtype": "bfloat16"}
    assert meta["backends"]["dispatch"]["backend"] == "all_to_all"
    assert meta["shapes"] == {"T": 128, "S": 64, "B": 2, "D": 256, "F": 128, "E": 8, "e": 4, "K": 2, "H": 4}
    assert meta["device"]["type"] == "cpu" and meta["versions"]["torchao"]
    assert len(meta["git"]["commit"]) in (40, 7) or meta["git"]["commit"] == "unknown"
    assert len(meta["timing"]["step_s_per_rank"]) == 2 and meta["timing"]["tokens_per_s_per_rank"] > 0


def test_self_launched_ranks_with_fake_deepep(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    cmd = [sys.executable, "-m", "reference", "--ep", "2", "--dispatch", "deepep", "--deepep-buffer", "fake",
           "--deepep-api", "v2", "--precision", "fp32", "--tokens", "64", "--steps", "1", "--profile", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["backends"]["dispatch"] == {"backend": "deepep", "ep": 2, "deepep_api": "v2", "buffer": "fake"}
    assert {"moe.dispatch", "moe.combine", "moe.permute"} <= _ranges(out / "trace_rank1.json")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ep", "3"], "expert parallel degree ep (3) must divide the number of routed experts (8)"),
        (["--ep", "2", "--dispatch", "deepep"], "needs DeepEP (the deep_ep package"),
        (["--ep", "2", "--dispatch", "local"], "--dispatch local runs all experts in one process"),
        (["--tokens", "100", "--seq-len", "64"], "--tokens (100) must be a positive multiple of --seq-len (64)"),
        (["--model", "qwen3-30b-a3b"], "attention 'gqa'"),
        (["--precision", "mxfp8", "--mxfp8-kernels", "real"], "SM100"),
    ],
)
def test_bad_input_one_message_exit_2(args: list[str], message: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "prof"
    assert main([*args, "--profile", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and not Path(f"{out}.partial").exists()


def test_mxfp8_rejects_odd_model_dims(tmp_path: Path, capsys) -> None:
    model = tmp_path / "odd.toml"
    model.write_text(
        "[odd]\nn_layers = 2\nn_dense_layers = 0\ndim = 240\nn_heads = 2\nvocab_size = 64\n"
        "q_lora_rank = 0\nkv_lora_rank = 32\nqk_nope_head_dim = 16\nqk_rope_head_dim = 16\n"
        "v_head_dim = 16\nn_routed_experts = 4\ntop_k = 2\nmoe_inter_dim = 100\n"
    )
    assert main(["--model", str(model), "--precision", "mxfp8", "--profile", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "dim (D) (240), moe_inter_dim (F) (100) must be a multiple of 32" in err
    assert not (tmp_path / "p").exists()


def test_profile_dir_not_empty(tmp_path: Path, capsys) -> None:
    (tmp_path / "keep.txt").write_text("x")
    assert main(["--profile", str(tmp_path)]) == 2
    assert "already exists and is not an empty directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_bad_input_under_torchrun_exits_without_hang(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "reference.run",
           "--ep", "2", "--dispatch", "deepep", "--profile", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs DeepEP" in proc.stderr
    assert not out.exists() and not Path(f"{out}.partial").exists()


def test_cli_exit_code_2_without_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "reference.run", "--ep", "3"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "must divide the number of routed experts" in proc.stderr
