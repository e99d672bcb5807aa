#!/usr/bin/env bash
# Mutation score of sim/ and calibrate/ against the fast in-process tests (setup.cfg [mutmut]: paths, test subset).
#
#   benchmarks/mutation.sh                        # every mutant of sim/ and calibrate/ (many hours on 2 cores)
#   SAMPLE=500 benchmarks/mutation.sh             # a seeded uniform random sample of every mutant of sim/ and calibrate/
#   benchmarks/mutation.sh 'sim.limits.*' 'sim.specs.*'   # some modules (mutmut name globs)
#   JOBS=2 benchmarks/mutation.sh ...             # parallel children (default 1: a shared 2-core box)
#
# SAMPLE=N draws N mutants with random.Random(SEED) (SEED defaults to 0) from every mutant mutmut
# generates for sim/ and calibrate/, then runs exactly those; the score comes with a 95% Wilson interval, the
# sampling error of estimating the whole population's score from N of its mutants.
#
# Needs the `mutation` extra (pip install -e ".[mutation]"). Works in ./mutants (git-ignored).
# Prints mutmut's per-mutant results, then: killed / (killed + survived) as the score; "no tests"
# (mutants on lines no selected test reaches) and timeouts are listed apart, not counted as killed.
set -euo pipefail
cd "$(dirname "$0")/.."
# No PYTHONPATH: mutmut puts ./mutants first on sys.path, a PYTHONPATH entry for this tree would shadow it.
unset PYTHONPATH
JOBS="${JOBS:-1}"
if [ -d mutants ]; then  # a previous run: test with today's tests, and re-collect which tests reach what
  rm -rf mutants/tests && cp -r tests mutants/ && rm -f mutants/mutmut-stats.json
fi
selection=("$@")
if [ -n "${SAMPLE:-}" ]; then
  # Generate every mutant and the test map without running any, then draw the sample.
  python -m mutmut run --max-children "$JOBS" 'no.such.module.*' > /dev/null 2>&1 || true  # nothing matches: generate and map only
  python -m mutmut results --all true > mutants/all.txt 2>/dev/null
  mapfile -t selection < <(python - "$SAMPLE" "${SEED:-0}" <<'PY'
import random, sys
names = sorted({line.rsplit(":", 1)[0].strip() for line in open("mutants/all.txt", encoding="utf-8")
                if ":" in line and line.strip().startswith(("sim.", "calibrate."))})
n = min(int(sys.argv[1]), len(names))
print(f"sampling {n} of {len(names)} mutants", file=sys.stderr)
print("\n".join(random.Random(int(sys.argv[2])).sample(names, n)))
PY
)
fi
if [ -n "${SAMPLE:-}" ]; then
  # The sample's mutants exist now (generated above from the lines the tests cover). mutmut would gather that
  # coverage again before running them (a whole instrumented test run, ~20 minutes on 2 cores) although no
  # source changed; with the setting off for this one call it keeps the mutants it made and skips the pass.
  cp setup.cfg mutants/setup.cfg.orig
  trap 'cp mutants/setup.cfg.orig setup.cfg' EXIT
  sed -i 's/^mutate_only_covered_lines = true$/mutate_only_covered_lines = false/' setup.cfg
fi
python -m mutmut run --max-children "$JOBS" "${selection[@]}" || true
if [ -n "${SAMPLE:-}" ]; then cp mutants/setup.cfg.orig setup.cfg; trap - EXIT; fi
python -m mutmut results --all true > mutants/results.txt 2>/dev/null || python -m mutmut results > mutants/results.txt || true
printf '%s\n' "${selection[@]}" > mutants/selection.txt
python - <<'PY'
import math, re
from collections import Counter
chosen = [l.strip() for l in open("mutants/selection.txt", encoding="utf-8") if l.strip()]
patterns = [re.compile(re.escape(p).replace(r"\*", ".*") + "$") for p in chosen] or [re.compile(".*")]
counts, survivors = Counter(), []
for line in open("mutants/results.txt", encoding="utf-8"):
    if ":" not in line:
        continue
    name, status = (x.strip() for x in line.rsplit(":", 1))
    if any(p.match(name) for p in patterns):
        counts[status] += 1
        if status == "survived":
            survivors.append(name)
killed, survived = counts["killed"], counts["survived"]
print(dict(counts))
print("survivors:", *survivors, sep="\n  ")
n = killed + survived
if n:
    p, z = killed / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    print(f"mutation score: {killed}/{n} = {p:.1%} (95% Wilson interval {centre - half:.1%}..{centre + half:.1%}; "
          f"killed / (killed + survived); 'no tests', timeouts and suspicious listed above)")
PY
