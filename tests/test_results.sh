#!/bin/sh
# test_results.sh: what is committed under results/ is exactly what the tool prints now.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
KVC=${KVC:-./kvc}   # make sanitize points this at build-san/kvc
export KVC
check() {  # check NAME FILE CMD...
    name=$1; file=$2; shift 2
    "$@" > "$tmp/out" 2>"$tmp/err"
    if cmp -s "$tmp/out" "$file"; then echo "PASS results-$name"
    else echo "FAIL results-$name: $file differs from \`$*\` (run make results)"; fail=1; fi
}
check lesson-txt results/lesson.txt "$KVC" run configs/lesson.json --no-timing
check lesson-csv results/lesson.csv "$KVC" run configs/lesson.json --no-timing --format csv
check practice-txt results/practice.txt "$KVC" run configs/practice.json --no-timing
check practice-csv results/practice.csv "$KVC" run configs/practice.json --no-timing --format csv
check realistic-txt results/realistic.txt "$KVC" run configs/realistic.json --no-timing
check methods-txt results/methods.txt "$KVC" run configs/methods.json --no-timing
check legal-assistant-txt results/legal_assistant.txt "$KVC" run configs/legal_assistant.json --no-timing
check size results/size.txt scripts/make-results.sh --print-size
check pareto-csv results/pareto.csv "$KVC" run configs/sweep-pareto.json --no-timing --format csv
exit $fail
