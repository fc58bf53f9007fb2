#!/bin/sh
# test_completion.sh: scripts/kvc-completion.bash completes subcommands, options, formats and method names
# (the names come from `./kvc methods`). Prints "PASS name" / "FAIL name: why"; exits 1 on any failure.
KVC=${KVC:-./kvc} exec bash -c '
. scripts/kvc-completion.bash
fail=0
K=$KVC   # the first word: method names come from "$K methods"
t() { # t NAME "EXPECTED WORDS" WORD...  (completes the last word)
    name=$1 want=$2; shift 2
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    _kvc 2>/dev/null
    got="${COMPREPLY[*]}"
    if [ "$got" = "$want" ]; then echo "PASS completion-$name"; else echo "FAIL completion-$name: got \"$got\", wanted \"$want\""; fail=1; fi
}
t commands "merge methods" "$K" m
t formats "csv" "$K" run c.json --format c
t size-formats "table csv" "$K" size --format ""
t run-options "--resume" "$K" run c.json --res
t run-timing-options "--timing-repeat" "$K" run c.json --timing-r
t merge-options "--config" "$K" merge --con
t help-commands "run" "$K" help r
t methods "experiments.0.method='"'"'\"quantize\"'"'"'" "$K" run c.json --set experiments.0.method=q
t set-paths "data.tokens=" "$K" run c.json --set data.t
exit $fail
'
