#!/usr/bin/env bash
# The CPU calibration loop (issue 8, Must show 1): profile + fit this CPU, then validate the simulator
# against the reference layer on held-out configurations. Prints the wall time of `calibrate run`
# (target: under 5 minutes on the 2-core CI machine) and the validate-reference table with its MAPE.
set -euo pipefail
out=${1:-/tmp/moesim-cpu-calibration.json}
start=$(date +%s)
moesim calibrate run --device cpu --out "$out" --no-progress
echo "calibrate run: $(( $(date +%s) - start )) s"
moesim validate-reference --calibration "$out"
