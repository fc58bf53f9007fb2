# bash completion for kvc: commands, options, option values, config and results files, and --set paths and values.
#   source scripts/kvc-completion.bash        (make install puts it in share/bash-completion/completions/kvc)
# Every list comes from kvc itself through its hidden helper `kvc __complete` (src/cli/complete.c): the commands
# and their options, the methods, the model shapes, and the keys a config may hold as the parser checks them, with
# the parameters of each experiment's method. So a new option, key, method or parameter completes without editing
# this file. Only the values of --format and --shard are listed here.
#
# --set PATH=JSON: PATH completes from the config on the command line (kvc run CONFIG, kvc merge --config CONFIG;
# else a built-in minimal config) after the --set values typed before it: "experiments.0." offers experiment 0's
# method's parameters. After '=' come the values kvc knows: method names, a parameter's choices, true/false, model
# shapes, inserted as shell words ('"quantize"'). bash splits words at '=' (COMP_WORDBREAKS), so a reply replaces
# only the text after the last '='; the path before it is never repeated.

# $1 without its shell quoting (single quotes, double quotes, backslashes); no expansion of any kind. An unclosed
# quote runs to the end (a word being typed).
_kvc_dequote() {
    local s=$1 out= q= c i
    for ((i = 0; i < ${#s}; i++)); do
        c=${s:i:1}
        if [[ $q == "'" ]]; then
            if [[ $c == "'" ]]; then q=; else out+=$c; fi
        elif [[ $q == '"' ]]; then
            if [[ $c == '"' ]]; then q=
            elif [[ $c == '\' && $((i + 1)) -lt ${#s} && '"\$`' == *"${s:i+1:1}"* ]]; then out+=${s:i+1:1}; ((i++))
            else out+=$c; fi
        elif [[ $c == "'" || $c == '"' ]]; then q=$c
        elif [[ $c == '\' ]]; then out+=${s:i+1:1}; ((i++))
        else out+=$c; fi
    done
    printf '%s' "$out"
}

# A --set candidate PATH=VALUE as a shell word: a JSON string value in single quotes ('"quantize"').
_kvc_quote_set() {
    local w=$1
    if [[ $w == *=* && ${w#*=} == *'"'* ]]; then printf "%s='%s'" "${w%%=*}" "${w#*=}"; else printf '%s' "$w"; fi
}

_kvc() {
    COMPREPLY=()
    # the words up to the cursor, split at blanks only (bash's COMP_WORDS also splits at '=' and ':')
    local line=${COMP_LINE:0:COMP_POINT} cur prev
    local -a words
    read -ra words <<<"$line"
    if [[ ${#words[@]} -eq 0 || $line =~ [[:space:]]$ ]]; then words+=(""); fi
    local cword=$((${#words[@]} - 1))
    cur=${words[cword]}
    prev=; [ "$cword" -gt 0 ] && prev=${words[cword - 1]}
    local kvc=${words[0]}
    [[ $kvc == "~/"* ]] && kvc=$HOME/${kvc#"~/"}
    if [ "$cword" -eq 1 ]; then
        COMPREPLY=($(compgen -W "$("$kvc" __complete commands 2>/dev/null) --version --help" -- "$cur"))
        return
    fi
    local cmd=${words[1]}
    # the command's options; those that take a value are listed with a second field
    local opts= valopts= o v
    while read -r o v; do
        opts+=" $o"
        [ -n "$v" ] && valopts+=" $o "
    done < <("$kvc" __complete options "$cmd" 2>/dev/null)

    # --set PATH=JSON (also --set=PATH=JSON)
    local setword= setpre=
    if [[ $prev == --set ]]; then setword=$cur
    elif [[ $cur == --set=* ]]; then setword=${cur#--set=} setpre=--set=
    fi
    if [[ $prev == --set || -n $setpre ]] && [[ $valopts == *" --set "* ]]; then
        # the config on the command line and the --set values before this one
        local config= i w skip=0
        local -a args=()
        for ((i = 2; i < cword; i++)); do
            w=${words[i]}
            if [ "$skip" -eq 1 ]; then skip=0; continue; fi
            case "$w" in
                --set) [ $((i + 1)) -lt "$cword" ] && args+=(--set "$(_kvc_dequote "${words[i + 1]}")"); skip=1 ;;
                --set=*) args+=(--set "$(_kvc_dequote "${w#--set=}")") ;;
                --config) [ $((i + 1)) -lt "$cword" ] && config=$(_kvc_dequote "${words[i + 1]}"); skip=1 ;;
                --config=*) config=$(_kvc_dequote "${w#--config=}") ;;
                -*=*) ;;
                -*) [[ $valopts == *" $w "* ]] && skip=1 ;;
                *) [ -z "$config" ] && [ "$cmd" != merge ] && config=$(_kvc_dequote "$w") ;;
            esac
        done
        [ -n "$config" ] && [ -f "$config" ] && args=(--config "$config" "${args[@]}")
        local c
        while IFS= read -r c; do
            COMPREPLY+=("$setpre$(_kvc_quote_set "$c")")
        done < <("$kvc" __complete set "${args[@]}" -- "$(_kvc_dequote "$setword")" 2>/dev/null)
        # a path ends in '.' or '=': more is typed after it
        [[ ${#COMPREPLY[@]} -gt 0 && ${COMPREPLY[0]} == *[.=] ]] && compopt -o nospace 2>/dev/null
        # readline replaces only the text after the last word-break character of cur (COMP_WORDBREAKS has '='):
        # drop that much from the front of each reply, else the path would be written twice
        local k pre=
        for ((k = ${#cur} - 1; k >= 0; k--)); do
            if [[ $COMP_WORDBREAKS == *"${cur:k:1}"* ]]; then pre=${cur:0:k+1}; break; fi
        done
        if [ -n "$pre" ]; then
            for k in "${!COMPREPLY[@]}"; do
                # a reply quoted differently from what was typed: compare without the quotes
                if [[ ${COMPREPLY[k]} == "$pre"* ]]; then COMPREPLY[k]=${COMPREPLY[k]#"$pre"}
                else COMPREPLY[k]=${COMPREPLY[k]#"${COMPREPLY[k]%%=*}="}; fi
            done
        fi
        return
    fi

    # the value of an option
    if [[ $valopts == *" $prev "* ]]; then
        case "$prev" in
            --format)
                case "$cmd" in
                    run) COMPREPLY=($(compgen -W "table csv jsonl" -- "$cur")) ;;
                    size|bench) COMPREPLY=($(compgen -W "table csv json jsonl" -- "$cur")) ;;
                    stats) COMPREPLY=($(compgen -W "table csv json" -- "$cur")) ;;
                    methods) COMPREPLY=($(compgen -W "text json jsonl" -- "$cur")) ;;
                    synth) COMPREPLY=($(compgen -W "npy safetensors" -- "$cur")) ;;
                esac ;;
            --model|--baseline-model)
                COMPREPLY=($(compgen -W "$("$kvc" __complete models 2>/dev/null)" -- "$cur")) ;;
            --out|-o|--csv-file)
                if [ "$cmd" = synth ]; then COMPREPLY=($(compgen -d -- "$cur"))
                else COMPREPLY=($(compgen -f -- "$cur")); fi
                compopt -o filenames 2>/dev/null ;;
            --config)
                COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur"))
                compopt -o filenames 2>/dev/null ;;
            --shard)
                COMPREPLY=($(compgen -W "1/2 1/4 1/8" -- "$cur")) ;;
        esac
        return   # numbers and lists: nothing to offer
    fi

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    case "$cmd" in
        run|synth|stats)
            COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null ;;
        merge)
            COMPREPLY=($(compgen -f -X '!*.csv' -- "$cur") $(compgen -f -X '!*.jsonl' -- "$cur")
                       $(compgen -f -X '!*.ndjson' -- "$cur") $(compgen -d -- "$cur"))
            compopt -o filenames 2>/dev/null ;;
        help)
            [ "$cword" -eq 2 ] && COMPREPLY=($(compgen -W "$("$kvc" __complete commands 2>/dev/null)" -- "$cur")) ;;
        methods)
            COMPREPLY=($(compgen -W "$("$kvc" __complete methods 2>/dev/null)" -- "$cur")) ;;
    esac
}
complete -F _kvc kvc ./kvc
