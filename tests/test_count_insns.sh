#!/bin/sh
# test_count_insns.sh: tests/count_insns (make bench's instructions per cached row, single-stepped) counts what the
# kernels must execute. The float value kernels of G heads make one FMA per G x W / lanes per row (W = 128 columns,
# lanes = 16 with AVX-512, 8 with AVX2), whatever else they do; two runs give the same counts; int8 keys of 4 heads
# run on AMX tiles exactly when the header says so, and KVC_ISA=avx512-noamx takes them to VNNI; so too int8 values of
# 4 heads (tile products instead of FMAs; the FMA count above is taken under KVC_ISA=avx512-noamx). Skips (SKIP lines)
# where this machine cannot single-step a child (ptrace refused) or has no objdump.
CI=${KVC_TESTBIN:-build/tests}/count_insns
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; fail=1; }
if [ ! -x "$CI" ]; then
    bad count-insns-built "$CI is not built (make testbin)"
    exit 1
fi
# one column of the row "FORMAT G SIDE": $1 the table, $2 format, $3 G, $4 side, $5 column name
col() { awk -v f="$2" -v g="$3" -v s="$4" -v c="$5" '$1 == "format" { for (i = 1; i <= NF; i++) n[$i] = i }
    $1 == f && $2 == g && $3 == s { print $(n[c]) }' "$1"; }

"$CI" f16 4 vals >"$tmp/f16" 2>"$tmp/err"
rc=$?
if [ $rc -eq 77 ]; then
    echo "SKIP count-insns: $(cat "$tmp/err")"
    exit 0
fi
[ $rc -eq 0 ] && ok count-insns-exit-0 || bad count-insns-exit-0 "exit $rc: $(head -c 300 "$tmp/err")"
set=$(sed -n 's/.*kernel set \([a-z0-9]*\).*/\1/p' "$tmp/f16")
case $set in
    avx512) lanes=16 ;;
    avx2) lanes=8 ;;
    *) lanes=0 ;;
esac
if [ $lanes -eq 0 ]; then
    echo "SKIP count-insns-fma: kernel set '$set' has no FMA kernels"
else
    want=$((4 * 128 / lanes))
    got=$(col "$tmp/f16" f16 4 vals fma)
    [ "$got" = "$want.00" ] && ok count-insns-f16-vals-fma || bad count-insns-f16-vals-fma "got $got FMAs a row, want $want ($set)"
    # int8 values of several heads take AMX tiles where the CPU has them (below); the float kernels without
    KVC_ISA=$([ $set = avx512 ] && echo avx512-noamx || echo avx2) "$CI" int8 4 vals >"$tmp/int8v" 2>&1
    got=$(col "$tmp/int8v" int8 4 vals fma)
    [ "$got" = "$want.00" ] && ok count-insns-int8-vals-fma || bad count-insns-int8-vals-fma "got $got FMAs a row, want $want ($set)"
    tot=$(col "$tmp/int8v" int8 4 vals total)
    awk -v t="$tot" -v w="$want" 'BEGIN { exit !(t > w) }' && ok count-insns-total-above-fma \
        || bad count-insns-total-above-fma "total $tot a row, not above its $want FMAs"
    # kivi4 (keys per channel, values per token, groups of 32): float kernels on both sides, at least one FMA per
    # 4 x 128 / lanes products a row (keys: q' = q s per group of tokens, then q' . n; values: w = p s per group)
    "$CI" kivi4 4 >"$tmp/kivi" 2>&1
    for side in keys vals; do
        got=$(col "$tmp/kivi" kivi4 4 $side fma)
        awk -v g="$got" -v w="$want" 'BEGIN { exit !(g != "" && g >= w) }' && ok count-insns-kivi4-$side-fma \
            || bad count-insns-kivi4-$side-fma "got '$got' FMAs a row, want at least $want ($set)"
    done
fi
# the same binary counts the same instructions twice
"$CI" int8 4 keys >"$tmp/a" 2>&1
"$CI" int8 4 keys >"$tmp/b" 2>&1
cmp -s "$tmp/a" "$tmp/b" && [ -n "$(col "$tmp/a" int8 4 keys total)" ] && ok count-insns-repeatable \
    || bad count-insns-repeatable "$(diff "$tmp/a" "$tmp/b" | head -n 4)"
# AMX: the int8 keys of 4 heads take tile instructions exactly when the header says the tiles are on
amx=$(col "$tmp/a" int8 4 keys amx)
if grep -q "AMX tiles" "$tmp/a"; then
    awk -v a="$amx" 'BEGIN { exit !(a > 0) }' && ok count-insns-amx-keys || bad count-insns-amx-keys "amx $amx a row"
    KVC_ISA=avx512-noamx "$CI" int8 4 keys >"$tmp/c" 2>&1
    amx=$(col "$tmp/c" int8 4 keys amx)
    vnni=$(col "$tmp/c" int8 4 keys vnni)
    [ "$amx" = 0.00 ] && awk -v v="$vnni" 'BEGIN { exit !(v > 0) }' && ok count-insns-noamx-keys \
        || bad count-insns-noamx-keys "amx $amx, vnni $vnni a row under KVC_ISA=avx512-noamx"
else
    [ "$amx" = 0.00 ] && ok count-insns-no-amx-keys || bad count-insns-no-amx-keys "amx $amx a row, header without AMX"
fi
# AMX values: the int8 values of 4 heads take tile instructions and about no FMAs exactly when the header says so
"$CI" int8 4 vals >"$tmp/d" 2>&1
amx=$(col "$tmp/d" int8 4 vals amx)
fma=$(col "$tmp/d" int8 4 vals fma)
if grep -q "int8 and int4 values of 2-8" "$tmp/d"; then
    awk -v a="$amx" -v f="$fma" 'BEGIN { exit !(a > 0 && f < 4) }' && ok count-insns-amx-values \
        || bad count-insns-amx-values "amx $amx, fma $fma a row"
else
    [ "$amx" = 0.00 ] && ok count-insns-no-amx-values || bad count-insns-no-amx-values "amx $amx a row, header without AMX values"
fi
"$CI" q4_2 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "usage" "$tmp/err" && ok count-insns-rejects-format || bad count-insns-rejects-format "$(cat "$tmp/err")"
exit $fail
