# bash completion for kvc: subcommands, options, formats, config and results files, method names.
#   source scripts/kvc-completion.bash        (make install puts it in share/bash-completion/completions/kvc)
# Method names come from `kvc methods`, so new methods complete without editing this file; they are
# offered for `--set experiments.N.method=` and for `kvc help`-style lookups.

_kvc_methods() {
    "${1:-kvc}" methods 2>/dev/null | awk '/^[a-z_0-9]+/ {print $1}'
}

_kvc() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion -n = || return
    else
        COMPREPLY=()
        cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
    fi
    local kvc=${words[0]}
    local cmds="run size merge synth methods bench help"
    if [ "$cword" -eq 1 ]; then
        COMPREPLY=($(compgen -W "$cmds --version --help" -- "$cur"))
        return
    fi
    local cmd=${words[1]}
    case "$prev" in
        --format)
            if [ "$cmd" = size ]; then COMPREPLY=($(compgen -W "table csv" -- "$cur"))
            elif [ "$cmd" = synth ]; then COMPREPLY=($(compgen -W "npy safetensors" -- "$cur"))
            else COMPREPLY=($(compgen -W "table csv jsonl" -- "$cur")); fi
            return ;;
        --out|-o)
            if [ "$cmd" = synth ]; then COMPREPLY=($(compgen -d -- "$cur"))
            else COMPREPLY=($(compgen -f -- "$cur")); fi
            compopt -o filenames 2>/dev/null
            return ;;
        --config)
            COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null
            return ;;
        --shard)
            COMPREPLY=($(compgen -W "1/2 1/4 1/8" -- "$cur"))
            return ;;
        --set)
            case "$cur" in
                experiments.*.method=*)
                    local pre=${cur%%=*}= typed=${cur#*=} m
                    typed=${typed//\'/}; typed=${typed//\"/}
                    COMPREPLY=()
                    for m in $(_kvc_methods "$kvc"); do
                        [[ "$m" == "$typed"* ]] && COMPREPLY+=("$pre'\"$m\"'")
                    done ;;
                *)
                    COMPREPLY=($(compgen -W "seed= data.tokens= data.head_dim= data.keys. data.values. data.query. data.source= data.files. experiments." -- "$cur"))
                    compopt -o nospace 2>/dev/null ;;
            esac
            return ;;
        --threads|--timing-repeat|--head-dim|--layers|--kv-heads|--tokens|--batch|--k-bits|--v-bits|--k-rank|--v-rank)
            return ;;
    esac
    case "$cmd" in
        run)
            if [[ "$cur" == -* ]]; then
                COMPREPLY=($(compgen -W "--set --format --out --resume --shard --list --quiet -q --per-head --no-timing --threads --timing-repeat --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null
            fi ;;
        synth)
            if [[ "$cur" == -* ]]; then
                COMPREPLY=($(compgen -W "-o --out --set --format --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null
            fi ;;
        merge)
            if [[ "$cur" == -* ]]; then
                COMPREPLY=($(compgen -W "--config --set --out --quiet -q --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -f -X '!*.csv' -- "$cur") $(compgen -f -X '!*.jsonl' -- "$cur")
                           $(compgen -f -X '!*.ndjson' -- "$cur") $(compgen -d -- "$cur"))
                compopt -o filenames 2>/dev/null
            fi ;;
        size)
            COMPREPLY=($(compgen -W "--head-dim --layers --kv-heads --tokens --batch --k-bits --v-bits --k-rank --v-rank --format --help" -- "$cur")) ;;
        help)
            [ "$cword" -eq 2 ] && COMPREPLY=($(compgen -W "$cmds" -- "$cur")) ;;
        methods)
            [ "$cword" -eq 2 ] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
    esac
}
complete -F _kvc kvc ./kvc
