#!/bin/sh
# test_layout.sh: src/ is built in layers by pipeline stage, and includes only point down (docs/HACKING.md).
# Reads every src/FOLDER/*.c and *.h and checks that
#   - every folder of src/ is in LAYERS below, and every LAYERS entry is a folder,
#   - every #include "..." names an existing src/FOLDER/FILE.h (written with its folder, compiled with -Isrc),
#   - every include points to the same or a lower layer (the order of LAYERS, lowest first),
#   - the folder graph has no cycles (two folders never include each other, directly or around a loop).
# ALLOWED lists known upward edges "FROM TO" that are being removed; each is printed as a note, and one that no
# longer occurs fails (remove its line then). Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed.
# Run from the project root.

# the layers, lowest first: a folder may include its own headers and those of the folders before it
LAYERS='base io model store methods config data decode eval report cli'

# upward edges allowed for now, one "FROM TO" a line, each with why and until when
ALLOWED='
'

fail=0
pass() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; fail=1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# ---- the folders
missing= extra=
for d in src/*/; do
    d=${d%/}; d=${d#src/}
    ls src/"$d"/*.[ch] >/dev/null 2>&1 || continue
    case " $LAYERS " in *" $d "*) ;; *) missing="$missing $d" ;; esac
done
for d in $LAYERS; do [ -d "src/$d" ] || extra="$extra $d"; done
if [ -z "$missing$extra" ]; then pass layout-folders-in-table
else bad layout-folders-in-table "${missing:+not in LAYERS (add them to tests/test_layout.sh):$missing}${missing:+${extra:+; }}${extra:+in LAYERS but not in src/:$extra}"
fi

# ---- the includes: "FILE LINE FROM TARGET" a line
for f in src/*/*.[ch]; do
    [ -f "$f" ] || continue
    awk -v file="$f" '/^[ \t]*#[ \t]*include[ \t]*"/ {
        s = $0; sub(/^[^"]*"/, "", s); sub(/".*$/, "", s); print file, NR, s }' "$f"
done >"$tmp/inc"

bad_target=$(while read -r file line target; do
    case "$target" in
        */*/*|/*|*..*) echo "$file:$line \"$target\"" ;;
        */*) [ -f "src/$target" ] || echo "$file:$line \"$target\"" ;;
        *) echo "$file:$line \"$target\" (no folder)" ;;
    esac
done <"$tmp/inc")
if [ -z "$bad_target" ]; then pass layout-includes-name-src-headers
else bad layout-includes-name-src-headers "these do not name an existing src/FOLDER/FILE.h: $(echo $bad_target)"
fi

# ---- the folder edges: "FROM TO FILE:LINE" for each include across folders
awk -v layers="$LAYERS" '
    BEGIN { n = split(layers, l, " "); for (i = 1; i <= n; i++) rank[l[i]] = i }
    { from = $1; sub(/^src\//, "", from); sub(/\/.*/, "", from)
      to = $3; if (to !~ /\//) next; sub(/\/.*/, "", to)
      if (from != to) print from, to, $1 ":" $2, (from in rank && to in rank && rank[to] > rank[from]) ? "up" : "down" }
' "$tmp/inc" >"$tmp/edges"

up=
while read -r from to where dir; do
    [ "$dir" = up ] || continue
    if printf '%s\n' "$ALLOWED" | grep -qx "$from $to"; then
        echo "note: allowed for now (tests/test_layout.sh ALLOWED): $from -> $to at $where"
    else
        up="$up $from->$to ($where)"
    fi
done <"$tmp/edges"
if [ -z "$up" ]; then pass layout-includes-point-down
else bad layout-includes-point-down "includes to a higher layer (order: $LAYERS):$up"
fi

stale=$(printf '%s\n' "$ALLOWED" | while read -r from to; do
    [ -n "$from" ] || continue
    grep -q "^$from $to " "$tmp/edges" || echo "$from->$to"
done)
if [ -z "$stale" ]; then pass layout-allowed-edges-still-occur
else bad layout-allowed-edges-still-occur "no longer included, remove from ALLOWED in tests/test_layout.sh: $(echo $stale)"
fi

# ---- cycles among folders (the ALLOWED edges left out): the transitive closure of the folder graph
cycles=$(printf '%s\n' "$ALLOWED" | awk -v layers="$LAYERS" '
    FNR == NR { if (NF == 2) allowed[$1 " " $2] = 1; next }
    !(($1 " " $2) in allowed) { e[$1, $2] = 1; node[$1] = 1; node[$2] = 1 }
    END {
        for (k in node) for (i in node) for (j in node)
            if (!e[i, j] && e[i, k] && e[k, j]) e[i, j] = 1
        n = split(layers, l, " ")
        for (i = 1; i <= n; i++) if (e[l[i], l[i]]) printf " %s", l[i]
    }' - "$tmp/edges")
if [ -z "$cycles" ]; then pass layout-no-folder-cycles
else bad layout-no-folder-cycles "these folders are on an include cycle:$cycles"
fi
exit $fail
