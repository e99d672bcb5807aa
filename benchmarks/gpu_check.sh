#!/usr/bin/env bash
# The one-GPU check (issue 16, Must show 5): what a person lent one GPU (e.g. one H200 for ~10 minutes)
# runs, from the repository root, in the environment that has moesim, torch and torchao:
#
#   benchmarks/gpu_check.sh [--quick] [--out FILE] [--force] [--keep-work]
#   benchmarks/gpu_check.sh --dry-run          # CI / no GPU: rehearse the same path on the CPU
#
# Steps: (1) the environment (nvidia-smi GPU name and driver; python, torch, torchao, CUDA, NCCL);
# (2) the GPU tests (tests/reference/test_gpu.py, markers gpu / multigpu / sm100) under a timeout;
# (3) `moesim calibrate profile --device cuda`: the microbenchmarks of reference/bench.py (bf16 GEMM and
# grouped GEMM grids, attention, memory bandwidth, MXFP8 quantize through TorchAO, all-to-all,
# interference) and the reference-layer calibration runs, under a timeout; (4) `moesim calibrate fit`;
# (5) the provenance stamped into the file (provenance.device: GPU name, compute capability, SMs, memory;
# provenance.driver: nvidia-smi; provenance.torch / torchao; provenance.date; provenance.git;
# provenance.sources: the commands; provenance.method), validated by sim.calibration; (6) the file loads:
# `moesim calibrate show` and `moesim predict --calibration FILE`; (7) the file is written, by an atomic
# rename and only at the end, to sim/calibrations/<gpu>-measured.json (or --out FILE), for committing.
#
# Everything is made in a work folder under $TMPDIR (removed on success, kept and named on failure).
# A GPU-test failure does not stop the measurements (device time is scarce): the calibration is still
# written, its notes record the failure, and the script exits 1.
#
# --dry-run prints every command of the GPU run and runs its CPU-capable parts on the CPU (the GPU tests,
# which skip; `calibrate profile --device cpu --quick`; the fit; the stamp; the load checks), all in the
# work folder: it never writes into the repository and exits 0 on a machine without CUDA (40-60 s on
# two cores). Without --dry-run and without a CUDA device it exits 2 with one line.
#
# Exit status: 0 done; 1 a step failed (or the GPU tests did); 2 a usage or environment error, before
# anything ran. Timeouts (seconds): GPU_CHECK_TEST_TIMEOUT (180), GPU_CHECK_PROFILE_TIMEOUT (330),
# GPU_CHECK_STEP_TIMEOUT (120, each other step). PYTHON: the interpreter (default: python on PATH).
set -euo pipefail

die() { printf 'gpu_check: error: %s\n' "$*" >&2; exit 2; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

orig_args=("$@")
dry_run=0 quick=0 force=0 keep=0 out=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) dry_run=1 ;;
        --quick) quick=1 ;;
        --force) force=1 ;;
        --keep-work) keep=1 ;;
        --out) [[ $# -ge 2 && -n $2 ]] || die "--out needs a FILE"; out=$2; shift ;;
        --out=*) out=${1#--out=}; [[ -n $out ]] || die "--out needs a FILE" ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument '$1' (benchmarks/gpu_check.sh --help)" ;;
    esac
    shift
done
if [[ -n $out && $out != /* ]]; then out="$PWD/$out"; fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python}
command -v "$PY" >/dev/null 2>&1 || PY=python3
command -v "$PY" >/dev/null 2>&1 || die "no python on PATH (set PYTHON=/path/to/python of the moesim environment)"
command -v timeout >/dev/null 2>&1 || die "needs coreutils' timeout"
T_TESTS=${GPU_CHECK_TEST_TIMEOUT:-180}
T_PROFILE=${GPU_CHECK_PROFILE_TIMEOUT:-330}
T_STEP=${GPU_CHECK_STEP_TIMEOUT:-120}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TORCHAO_FORCE_SKIP_LOADING_SO_FILES=${TORCHAO_FORCE_SKIP_LOADING_SO_FILES:-1}
export GIT_OPTIONAL_LOCKS=0  # the reference runs read `git status`: never let it rewrite the index
if [[ $dry_run -eq 1 ]]; then export PYTHONDONTWRITEBYTECODE=1; fi

# --- preflight: the environment, silently (its stderr is torch's import noise) ------------------------
probe=$("$PY" - 2>/dev/null <<'PY' || true
import platform
import re
import shutil
import subprocess
import sys

out = {"python": platform.python_version(), "executable": sys.executable}
try:
    import torch

    import sim.catalog
except Exception as err:  # noqa: BLE001  (any import failure is the one message)
    print(f"error\tcannot import torch and moesim with {sys.executable}: {type(err).__name__}: {err}")
    sys.exit(0)
out["torch"] = torch.__version__
out["cuda_build"] = torch.version.cuda or "none"
try:
    import torchao

    out["torchao"] = torchao.__version__
except Exception as err:  # noqa: BLE001
    out["torchao"] = ""
    out["torchao_error"] = f"{type(err).__name__}: {err}"
out["cuda_available"] = "1" if torch.cuda.is_available() else "0"
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    out.update(torch_gpu=p.name, capability=f"{p.major}.{p.minor}", num_sms=p.multi_processor_count,
               gpu_memory_gib=f"{p.total_memory / 2**30:.0f}", gpu_count=torch.cuda.device_count())
    try:
        out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        out["nccl"] = ""
smi = shutil.which("nvidia-smi")
out["smi"] = smi or "not found"
if smi:
    for fields in ("name,driver_version,memory.total,compute_cap", "name,driver_version,memory.total"):
        try:
            r = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as err:
            out["smi_error"] = str(err)
            break
        if r.returncode == 0 and r.stdout.strip():
            first = [c.strip() for c in r.stdout.strip().splitlines()[0].split(",")]
            out.update(zip(("smi_name", "driver", "smi_memory", "smi_compute_cap"), first))
            break
        out["smi_error"] = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["failed"]
name = out.get("torch_gpu") or out.get("smi_name") or ""
label = re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")
slug = re.sub(r"^nvidia-", "", label)
out["gpu_label"], out["gpu_slug"] = label, slug
names = sorted(sim.catalog.gpu_names(), key=len, reverse=True)
out["catalog_gpu"] = next((n for n in names if slug == n or slug.startswith(n + "-")), "")
for k, v in out.items():
    print(f"{k}\t{' '.join(str(v).split())}")
PY
)
declare -A E=()
while IFS=$'\t' read -r k v; do
    [[ -n $k ]] && E[$k]=$v
done <<<"$probe"
[[ -z ${E[error]:-} ]] || die "${E[error]} (pip install -e '.[reference]', or set PYTHON)"
[[ -n ${E[torch]:-} ]] || die "could not run $PY to read the environment (set PYTHON=/path/to/python)"
if [[ $dry_run -eq 0 ]]; then
    [[ ${E[cuda_available]:-0} == 1 ]] || die "no CUDA device visible to torch (torch ${E[torch]}, CUDA build \
${E[cuda_build]:-none}, nvidia-smi ${E[smi]:-not found}); nothing was run; rehearse on this machine with --dry-run"
    [[ -n ${E[driver]:-} ]] || die "CUDA is visible but nvidia-smi reports no driver (${E[smi_error]:-${E[smi]}}); \
the calibration's provenance.driver needs it"
    [[ -n ${E[torchao]:-} ]] || die "torchao does not import (${E[torchao_error]:-}); the MXFP8 benchmark and \
provenance.torchao need it"
    slug=${E[gpu_slug]}
    dest=${out:-$ROOT/sim/calibrations/$slug-measured.json}
    if [[ -e $dest && $force -eq 0 ]]; then die "$dest exists; pass --force to replace it, or --out FILE"; fi
    mode=gpu device=cuda
else
    slug=${E[gpu_slug]:-}
    dest=${out:-$ROOT/sim/calibrations/${slug:-<gpu>}-measured.json}
    slug=dry-run-cpu
    mode=dry-run device=cpu
    export CUDA_VISIBLE_DEVICES=""  # the rehearsal is the CPU path even on a machine with a GPU
fi
name=$slug-measured

work=$(mktemp -d "${TMPDIR:-/tmp}/moesim-gpu-check.XXXXXX")
cleanup() {
    local rc=$?
    if [[ $keep -eq 1 || $rc -ne 0 ]]; then
        echo "gpu_check: work folder kept: $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
printf '%s\n' "$probe" >"$work/env.tsv"

# a command as one copy-pasteable line: plain words as they are, anything else in single quotes
show() {
    local a sep="" q="'" line=""
    for a in "$@"; do
        if [[ -n $a && $a =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then line+="$sep$a"; else line+="$sep'${a//$q/$q\\$q$q}'"; fi
        sep=" "
    done
    printf '%s' "$line"
}
step_no=0 step_name=preflight
step() { step_no=$((step_no + 1)) step_name=$*; printf '\n== [%d/7] %s  (t=%ds)\n' "$step_no" "$*" "$SECONDS"; }
failed() {
    echo "gpu_check: error: step $step_no/7 ($step_name) failed (exit $1); nothing was written into the repository" >&2
    exit 1
}
trap 'failed $?' ERR
run() { printf '+ %s\n' "$(show "$@")"; "$@"; }
rel() { printf '%s' "${1#"$ROOT"/}"; }

profile_args=(--out "$work/profile")
gpu_profile=(timeout -k 10 "$T_PROFILE" "$PY" -m moesim calibrate profile --device cuda "${profile_args[@]}")
[[ $quick -eq 0 ]] || gpu_profile+=(--quick)
cpu_profile=(timeout -k 10 "$T_PROFILE" "$PY" -m moesim calibrate profile --device cpu "${profile_args[@]}" --quick)
tests_cmd=(timeout -k 10 "$T_TESTS" "$PY" -m pytest -p no:cacheprovider -q -rfEs -m "gpu or multigpu or sm100"
           tests/reference/test_gpu.py)
fit_cmd=(timeout -k 10 "$T_STEP" "$PY" -m moesim calibrate fit "$work/profile/profile.json" --out "$work/fit.json"
         --name "$name")
cal="$work/$name.json"
predict_gpu=()
if [[ $mode == gpu && -n ${E[catalog_gpu]:-} ]]; then
    predict_gpu=(--gpu "${E[catalog_gpu]}" --precision bf16)
elif [[ $mode == dry-run ]]; then
    predict_gpu=(--gpu h200 --precision bf16)  # the stand-in for the one GPU this rehearses
fi
show_cmd=(timeout -k 10 "$T_STEP" "$PY" -m moesim calibrate show "$cal")
predict_cmd=(timeout -k 10 "$T_STEP" "$PY" -m moesim predict --calibration "$cal" "${predict_gpu[@]}" --json)

# --- the plan -----------------------------------------------------------------------------------------
echo "gpu_check ($mode): $(show benchmarks/gpu_check.sh "${orig_args[@]}")"
echo "work folder: $work"
echo "plan (the GPU run; --dry-run runs the CPU stand-ins marked 'dry-run runs'):"
echo "  1 env      $(show nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader)"
echo "             python: torch, torchao, CUDA and NCCL versions, torch.cuda device 0"
echo "  2 tests    $(show "${tests_cmd[@]}")"
echo "  3 profile  $(show "${gpu_profile[@]}")"
[[ $mode == gpu ]] || echo "             dry-run runs: $(show "${cpu_profile[@]}")"
echo "  4 fit      $(show "${fit_cmd[@]}")"
echo "  5 stamp    provenance.device (GPU name, compute capability, SMs, memory), provenance.driver (nvidia-smi),"
echo "             provenance.torch, provenance.torchao, provenance.date (UTC), provenance.git,"
echo "             provenance.sources (the commands), provenance.method -> $cal"
echo "  6 check    $(show "${show_cmd[@]}")"
echo "             $(show "${predict_cmd[@]}")"
if [[ $mode == gpu ]]; then
    echo "  7 write    $dest (atomic rename, at the end)"
else
    echo "  7 write    $(rel "$dest") (atomic rename, at the end): dry-run only prints it"
    if [[ -e $dest ]]; then echo "             ($(rel "$dest") exists: the GPU run needs --force to replace it)"; fi
fi

# --- 1 env --------------------------------------------------------------------------------------------
step env
if [[ ${E[smi]:-not found} != "not found" ]]; then
    echo "+ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader"
    echo "  GPU ${E[smi_name]:-?}, driver ${E[driver]:-?}, memory ${E[smi_memory]:-?}, compute capability ${E[smi_compute_cap]:-?}"
else
    echo "  nvidia-smi: not found (no NVIDIA driver on this machine)"
fi
echo "  python ${E[python]} (${E[executable]}), torch ${E[torch]} (CUDA build ${E[cuda_build]}), torchao ${E[torchao]:-not importable}"
if [[ ${E[cuda_available]:-0} == 1 ]]; then
    echo "  torch.cuda: ${E[gpu_count]} device(s); 0: ${E[torch_gpu]} (compute ${E[capability]}, ${E[num_sms]} SMs, \
${E[gpu_memory_gib]} GiB), NCCL ${E[nccl]:-?}; catalog GPU: ${E[catalog_gpu]:-none}"
else
    echo "  torch.cuda: not available"
fi
[[ $mode == gpu ]] || echo "  dry-run: CUDA hidden (CUDA_VISIBLE_DEVICES=''); the steps below run on the CPU"

# --- 2 tests ------------------------------------------------------------------------------------------
step "GPU tests"
printf '+ %s\n' "$(show "${tests_cmd[@]}")"
trap - ERR
set +e
"${tests_cmd[@]}" 2>&1 | tee "$work/tests.log"
tests_rc=${PIPESTATUS[0]}
set -e
trap 'failed $?' ERR
tests_tail=$(grep -E '(passed|failed|skipped|error|no tests ran)' "$work/tests.log" | tail -n 1 | tr -d '=' \
             | sed -e 's/^ *//' -e 's/ *$//' || true)
case $tests_rc in
    0) tests_summary="ok: ${tests_tail:-no summary}" ;;
    124 | 137) tests_summary="timed out after ${T_TESTS} s" ;;
    *) tests_summary="FAILED (exit $tests_rc): ${tests_tail:-see the log}" ;;
esac
echo "  GPU tests: $tests_summary"

# --- 3 profile, 4 fit ---------------------------------------------------------------------------------
step "profile ($device)"
if [[ $mode == gpu ]]; then run "${gpu_profile[@]}"; else run "${cpu_profile[@]}"; fi
step fit
run "${fit_cmd[@]}"

# --- 5 stamp ------------------------------------------------------------------------------------------
step "stamp provenance"
# the commands as the sources name them: without the timeout and interpreter, the work folder as WORK
if [[ $mode == gpu ]]; then profile_used=$(show "${gpu_profile[@]:7}"); else profile_used=$(show "${cpu_profile[@]:7}"); fi
profile_used="moesim ${profile_used//"$work"/WORK}"
fit_used=$(show "${fit_cmd[@]:7}")
fit_used="moesim ${fit_used//"$work"/WORK}"
echo "+ $PY - (stamp) $(rel "$work/fit.json") -> $cal"
"$PY" - "$work/fit.json" "$work/profile/profile.json" "$work/env.tsv" "$cal" "$mode" "$tests_summary" \
    "$(show benchmarks/gpu_check.sh "${orig_args[@]}")" "$profile_used" "$fit_used" <<'PY'
import datetime
import json
import sys
from pathlib import Path

from sim.calibration import parse_calibration

fit_path, profile_path, env_path, out_path, mode, tests, command, profile_cmd, fit_cmd = sys.argv[1:10]
env = dict(line.split("\t", 1) for line in Path(env_path).read_text(encoding="utf-8").splitlines() if "\t" in line)
doc = json.loads(Path(fit_path).read_text(encoding="utf-8"))
prof = json.loads(Path(profile_path).read_text(encoding="utf-8"))
info, versions = prof.get("device_info") or {}, prof.get("versions") or {}
prov = dict(doc["provenance"])
gpu = mode == "gpu"
if gpu:
    info = info if info.get("type") == "cuda" else {}  # from the reference runs (none if every run failed)
    name = info.get("name") or env.get("torch_gpu") or env.get("smi_name")
    detail = [f"compute capability {info.get('capability') or env.get('capability')}",
              f"{info.get('num_sms') or env.get('num_sms')} SMs",
              env.get("smi_memory") or f"{env.get('gpu_memory_gib')} GiB",
              f"{env.get('gpu_count', '1')} visible"]
    prov["device"] = f"{name} ({', '.join(detail)})"
    # the measured device's own name (not a catalog one: the rates are this GPU's, fitted against its
    # measured peak), instead of fit_profile's CPU label
    label = env.get("gpu_label") or "cuda-gpu"
    doc["gpu"] = label
    if isinstance(doc.get("device_spec"), dict):
        doc["device_spec"]["name"] = label
prov["driver"] = env.get("driver") or None
prov["torch"] = versions.get("torch") or env.get("torch") or None
prov["torchao"] = versions.get("torchao") or env.get("torchao") or None
prov["date"] = prov.get("date") or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
prov["method"] = (("benchmarks/gpu_check.sh on one GPU" if gpu else
                   "benchmarks/gpu_check.sh --dry-run: a CPU rehearsal, not a GPU calibration")
                  + ": moesim calibrate profile + moesim calibrate fit (microbenchmarks + reference-layer runs)")
prov["sources"] = [*prov.get("sources", []), f"command: {command}", f"profile: {profile_cmd}", f"fit: {fit_cmd}"]
doc["provenance"] = prov
notes = list(doc.get("notes", []))
notes.append(f"gpu_check: GPU tests (pytest -m 'gpu or multigpu or sm100' tests/reference/test_gpu.py): {tests}")
notes.append(f"gpu_check: environment: python {env.get('python')}, torch {env.get('torch')}, CUDA build "
             f"{env.get('cuda_build')}, NCCL {env.get('nccl') or 'none'}, nvidia-smi {env.get('smi')}")
if gpu:
    notes.append("gpu_check: calibrate.microbench.fit_profile fitted this CUDA profile with its CPU conventions "
                 "(the 'CPU:' notes): device_spec peak = the best measured bf16 GEMM rate, hbm bandwidth = the "
                 "measured add() bandwidth / 2; predictions for a catalog GPU apply these efficiencies to its datasheet")
doc["notes"] = notes
text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
cal = parse_calibration(text, out_path)  # the schema check (sim.calibration); raises ConfigError
required = ("device", "driver", "torch", "torchao", "date")
missing = [k for k in required if not cal.provenance.get(k)]
if gpu and missing:
    sys.exit(f"gpu_check: error: the calibration's provenance lacks {', '.join(missing)}")
Path(out_path).write_text(text, encoding="utf-8")
for k in (*required, "git", "method"):
    v = cal.provenance.get(k)
    print(f"  provenance.{k} = {v if v is not None else 'null (' + ('no NVIDIA driver here' if k == 'driver' else 'unknown') + ')'}")
for s in cal.provenance.get("sources", []):
    print(f"  provenance.sources: {s}")
print(f"  gpu {cal.gpu}; {len(cal.tables.get('residuals', {}))} fitted tables with residuals")
PY

# --- 6 check ------------------------------------------------------------------------------------------
step "check: the calibration loads"
run "${show_cmd[@]}"
printf '+ %s > %s\n' "$(show "${predict_cmd[@]}")" "$(rel "$work/predict.json")"
"${predict_cmd[@]}" >"$work/predict.json"
"$PY" - "$work/predict.json" "$cal" <<'PY'
import json
import sys

doc = json.load(open(sys.argv[1], encoding="utf-8"))
cal = doc.get("calibration") or {}
preds = doc.get("predictions") or []
if not isinstance(cal, dict) or cal.get("path") != sys.argv[2] or not preds:
    sys.exit(f"gpu_check: error: moesim predict did not use {sys.argv[2]} (calibration: {cal!r:.200})")
p = preds[0]
if not p.get("tokens_per_s_per_gpu", 0) > 0:
    sys.exit(f"gpu_check: error: moesim predict gave no throughput: {p.get('tokens_per_s_per_gpu')!r}")
print(f"  moesim predict --calibration: loads ({cal.get('name')}, gpu {cal.get('gpu')}); {p.get('name')}: "
      f"{p['tokens_per_s_per_gpu']:.1f} tokens/s/GPU on {p.get('n_gpus')} x {p.get('gpu')}")
PY

# --- 7 write ------------------------------------------------------------------------------------------
step write
if [[ $mode == gpu ]]; then
    mkdir -p "$(dirname "$dest")"
    partial="$dest.partial.$$"
    cp "$cal" "$partial"
    mv -f "$partial" "$dest" || { rm -f "$partial"; false; }
    echo "  wrote $(rel "$dest") (commit it; provenance as above)"
else
    echo "  dry-run: would write $(rel "$dest") from the GPU run's $(basename "$cal"); nothing written into the repository"
fi
echo "gpu_check ($mode): done in ${SECONDS} s"
if [[ $tests_rc -ne 0 ]]; then
    echo "gpu_check: error: GPU tests $tests_summary (the calibration notes record it)" >&2
    exit 1
fi
