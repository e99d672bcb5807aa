"""``sim.predict.predict`` and ``moesim predict`` give the same number for the same plan (issue 27 item 5): the
README's single-plan commands, each predicted through the CLI and then through the library with the plan the
CLI resolved (no costs given: the stack's own calibration on its GPU, else the defaults, as the CLI takes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesim.cli import main
from sim.catalog import load_cluster, load_model
from sim.loaders import load_model_file, plan_from_mapping
from sim.predict import predict

README_COMMANDS = (
    "--model deepseek-v3-16b --gpu h100 --gpus 64 --ep 8 --ep-backend deepep",
    "--model deepseek-v3-671b --gpu gb200 --gpus 256 --pp 4 --vpp 4 --ep 64 --seq-len 4096 --global-batch 4096 "
    "--ac selective --precision mxfp8 --ep-backend hybridep --stack megatron",
    "--model deepseek-v3-671b --gpu gb200 --gpus 256 --pp 4 --vpp 4 --ep 64 --seq-len 4096 --global-batch 4096 "
    "--ac selective --precision mxfp8 --ep-backend hybridep --stack megatron --cuda-graphs partial "
    "--cuda-graph-scope moe_router,moe_preprocess --fp8-output-proj --fp8-attention",
    "--model deepseek-v3-671b --gpu h800 --gpus 2048 --stack deepseek --pp 16 --pp-schedule dualpipe --ep 64 --tp 1 "
    "--seq-len 4096 --global-batch 15360 --precision fp8-blockwise --ep-backend deepep --ac selective",
    "--model gpt-oss-120b --gpu b200 --gpus 64 --ep 8 --seq-len 4096 --global-batch 1280 --micro-batch 4 "
    "--precision bf16 --stack megatron",
    "--model examples/glm-4.5/config.json --gpu b200 --gpus 128 --ep 32 --pp 4",
)
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", README_COMMANDS)
def test_library_and_cli_agree(argv: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in argv.split()]
    assert main(["predict", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (cli,) = doc["predictions"]
    prov = doc["provenance"]
    cluster = load_cluster(prov["cluster"], n_gpus=prov["n_gpus"], gpu=prov["gpu"])
    plan = plan_from_mapping(cli["plan"])
    model_arg = argv.split()[argv.split().index("--model") + 1]
    model = load_model_file(ROOT / model_arg) if model_arg.endswith((".json", ".toml")) else load_model(cli["model"])
    lib = predict(model, cluster, plan, stack=cli["stack"])
    assert lib.tokens_per_s_per_gpu == pytest.approx(cli["tokens_per_s_per_gpu"], rel=1e-9)
