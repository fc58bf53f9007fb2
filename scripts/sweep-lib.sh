# sweep-lib.sh: what scripts/sweep-parallel.sh and scripts/sweep-slurm.sh share, sourced by both (bash): the
# options that go to `kvc run`, the two positional arguments CONFIG.json and OUT checked, the shard files'
# extension from OUT, which kvc to run, and absolute paths. Not a script of its own. The caller defines die()
# (its message prefix) first, and the arrays sets, runopts and pos (empty).

# sweep_run_opt OPTION: one word that is not the script's own option goes to kvc run (runopts), except the
# options the script sets for every shard itself, which are refused. --set values go to sets instead: the
# merge needs them too.
sweep_run_opt() {
    case "$1" in
        --out|--out=*|-o|-o=*|--shard|--shard=*|--resume|--list|--format|--format=*)
            die "$1: the script sets it for every shard (--out and --format from OUT, --shard, --resume); leave it out" ;;
    esac
    runopts+=("$1")
}

# sweep_after_dashdash ARGS...: everything after `--` goes to kvc run as it is (an option's value may be a
# separate word there), --set PATH=JSON to sets.
sweep_after_dashdash() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --set) [ $# -ge 2 ] || die "missing value after --set"; sets+=(--set "$2"); shift 2 ;;
            --set=*) sets+=(--set "${1#--set=}"); shift ;;
            *) sweep_run_opt "$1"; shift ;;
        esac
    done
}

# sweep_args CONFIG OUT: sets config, out and ext (csv, jsonl or ndjson, from OUT), or dies.
sweep_args() {
    [ $# -eq 2 ] || die "need CONFIG.json and OUT.csv (or OUT.jsonl), got $# words: $*; a kvc run option \
that takes a value is written --opt=VALUE or after -- (see --help)"
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

# sweep_check_run: the config, the --set values and the kvc run options are valid (kvc run --list computes
# nothing), before any shard starts; kvc's own message otherwise, and exit 2.
sweep_check_run() {
    "$kvc" run "$config" "${sets[@]}" "${runopts[@]}" --list >/dev/null || exit 2
}

# abs PATH: PATH made absolute (its directory must exist).
abs() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$(cd "$(dirname "$1")" && pwd)" "$(basename "$1")" ;; esac; }
