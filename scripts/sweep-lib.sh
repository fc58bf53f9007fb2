# sweep-lib.sh: what scripts/sweep-parallel.sh and scripts/sweep-slurm.sh share, sourced by both (bash): the
# two positional arguments CONFIG.json and OUT checked, the shard files' extension from OUT, which kvc to run,
# and absolute paths. Not a script of its own. The caller defines die() (its message prefix) first.

# sweep_args CONFIG OUT: sets config, out and ext (csv, jsonl or ndjson, from OUT), or dies.
sweep_args() {
    [ $# -eq 2 ] || die "need CONFIG.json and OUT.csv (or OUT.jsonl); see --help"
    config=$1 out=$2
    [ -r "$config" ] || die "cannot read the config $config"
    case "$out" in
        *.csv) ext=csv ;;
        *.jsonl) ext=jsonl ;;
        *.ndjson) ext=ndjson ;;
        *) die "OUT must end in .csv, .jsonl or .ndjson (got $out)" ;;
    esac
}

# sweep_find_kvc HERE: when kvc is empty, sets it to HERE/../kvc (the build next to the scripts), else to kvc on
# PATH, or dies.
sweep_find_kvc() {
    if [ -z "$kvc" ]; then
        if [ -x "$1/../kvc" ]; then kvc=$1/../kvc; else kvc=$(command -v kvc) || die "kvc not found; use --kvc PATH"; fi
    fi
}

# abs PATH: PATH made absolute (its directory must exist).
abs() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$(cd "$(dirname "$1")" && pwd)" "$(basename "$1")" ;; esac; }
