#!/usr/bin/env bash
# Mutation score of sim/ against the fast in-process tests (setup.cfg [mutmut]: paths, test subset).
#
#   benchmarks/mutation.sh                      # every module of sim/ (hours on 2 cores)
#   benchmarks/mutation.sh 'sim.limits.*' 'sim.specs.*'   # some modules (mutmut name globs)
#   JOBS=2 benchmarks/mutation.sh ...           # parallel children (default 1: a shared 2-core box)
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
  cp -r tests mutants/ && rm -f mutants/mutmut-stats.json
fi
python -m mutmut run --max-children "$JOBS" "$@" || true
python -m mutmut results --all true > mutants/results.txt 2>/dev/null || python -m mutmut results > mutants/results.txt || true
python - "$@" <<'PY'
import re, sys
from collections import Counter
patterns = [re.compile(p.replace(".", r"\.").replace("*", ".*") + "$") for p in sys.argv[1:]] or [re.compile(".*")]
counts = Counter()
for line in open("mutants/results.txt", encoding="utf-8"):
    if ":" not in line:
        continue
    name, status = (x.strip() for x in line.rsplit(":", 1))
    if any(p.match(name) for p in patterns):
        counts[status] += 1
killed, survived = counts["killed"], counts["survived"]
print(dict(counts))
if killed + survived:
    print(f"mutation score: {killed}/{killed + survived} = {killed / (killed + survived):.1%} "
          f"(killed / (killed + survived); 'no tests', timeouts and suspicious listed above)")
PY
