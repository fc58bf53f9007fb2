#!/bin/sh
# test_completion.sh: scripts/kvc-completion.bash, with Debian's bash-completion loaded (the package
# bash-completion; without it the checks run on the script alone and one SKIP line says so).
#  - completion-*: _kvc called as bash calls it (COMP_LINE, COMP_POINT; _kvc reads the words from COMP_LINE);
#    each check compares the line that results once the reply replaces the word readline
#    completes (the text after the last word-break character) with the line wanted, so a --set path written twice
#    fails.
#  - completion-readline-*: the same in a real interactive bash on a pseudo-terminal (python3's pty): the line is
#    typed, TAB pressed, and the words the shell then passes are printed.
#  - completion-from-kvc-*: every option of every command (kvc __complete options) and every method parameter
#    (kvc methods --format json) completes: nothing is a list of the script's own.
# Prints "PASS name" / "FAIL name: why" / "SKIP name: why"; exits 1 on any failure. Run from the project root.
KVC=${KVC:-./kvc}
BC=${KVC_BASH_COMPLETION:-/usr/share/bash-completion/bash_completion}
if [ ! -f "$BC" ]; then
    echo "SKIP completion-bash-completion: $BC is missing (Debian package bash-completion; scripts/bootstrap.sh --deps installs it); the checks below run without it"
    BC=
fi
KVC=$KVC BC=$BC bash -c '
[ -n "$BC" ] && . "$BC"
. scripts/kvc-completion.bash
fail=0
K=$KVC   # the first word: kvc __complete answers from this binary
# c NAME LINE WANTED: completes at the end of LINE; WANTED is the line after readline puts the reply in (one reply),
# or "{a b ...}": the replies themselves (several)
Q=$(printf "\047")   # a single quote (this script is itself in single quotes)
c() {
    name=$1 line=$2 want=$3
    COMP_LINE=$line; COMP_POINT=${#line}; COMP_TYPE=9; COMP_KEY=9
    read -ra COMP_WORDS <<<"$line"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _kvc 2>/dev/null
    local got i
    if [[ $want == "{"*"}" ]]; then
        got="{${COMPREPLY[*]}}"
    else
        # readline: the word it completes starts after the last blank or word-break character before the cursor
        local start=0
        for ((i = ${#line} - 1; i >= 0; i--)); do
            if [[ ${line:i:1} == [[:space:]] || $COMP_WORDBREAKS == *"${line:i:1}"* ]]; then start=$((i + 1)); break; fi
        done
        if [ ${#COMPREPLY[@]} -eq 1 ]; then got=${line:0:start}${COMPREPLY[0]}; else got="(${#COMPREPLY[@]} replies: ${COMPREPLY[*]})"; fi
    fi
    if [ "$got" = "$want" ]; then echo "PASS completion-$name"; else echo "FAIL completion-$name: got \"$got\", wanted \"$want\""; fail=1; fi
}
P=configs/practice.json
c commands              "$K m"                                        "{methods merge}"
c formats               "$K run c.json --format c"                    "$K run c.json --format csv"
c size-formats          "$K size --format "                           "{table csv json jsonl}"
c methods-formats       "$K methods --format j"                       "{json jsonl}"
c run-options           "$K run c.json --res"                         "$K run c.json --resume"
c run-timing-options    "$K run c.json --timing-r"                    "$K run c.json --timing-repeat"
c merge-options         "$K merge --con"                              "$K merge --config"
c bench-options         "$K bench --naive"                            "$K bench --naive-repeat"
c bench-formats         "$K bench --format js"                        "{json jsonl}"
c size-options          "$K size --baseline-k"                        "$K size --baseline-kv-heads"
c size-models           "$K size --model mistral"                     "$K size --model mistral-7b"
c help-commands         "$K help r"                                   "$K help run"
c methods-name          "$K methods kiv"                              "$K methods kivi"
# the issue: the path before "=" must not be written again
c set-method-value      "$K run c.json --set experiments.0.method=q"  "$K run c.json --set experiments.0.method=$Q\"quantize\"$Q"
c set-method-value-cfg  "$K run $P --set experiments.0.method=q"      "$K run $P --set experiments.0.method=$Q\"quantize\"$Q"
c set-equals-form       "$K run $P --set=experiments.0.method=sn"     "$K run $P --set=experiments.0.method=$Q\"snapkv\"$Q"
c set-enum-value        "$K run $P --set experiments.0.scale_dtype=fp3" "$K run $P --set experiments.0.scale_dtype=$Q\"fp32\"$Q"
c set-enum-list-item    "$K run $P --set experiments.0.axis.1=c"      "$K run $P --set experiments.0.axis.1=$Q\"channel\"$Q"
c set-bool-value        "$K run $P --set experiments.0.symmetric=t"   "$K run $P --set experiments.0.symmetric=true"
c set-shape-value       "$K run $P --set data.shape=gemma"            "$K run $P --set data.shape=$Q\"gemma-2-9b\"$Q"
c set-paths             "$K run c.json --set data.t"                  "$K run c.json --set data.tokens="
c set-path-object       "$K run $P --set data.ke"                     "$K run $P --set data.keys."
c set-path-in-config    "$K run $P --set data.keys.g"                 "$K run $P --set data.keys.generator="
c set-path-absent-object "$K run $P --set data.rope.b"                "$K run $P --set data.rope.base="
c set-path-list         "$K run $P --set data.keys.outliers."         "{data.keys.outliers.0. data.keys.outliers.1.}"
c set-path-params       "$K run $P --set experiments.0.gr"            "$K run $P --set experiments.0.group_size="
# the method typed in an earlier --set decides the parameters offered
c set-after-set         "$K run $P --set experiments.0.method=$Q\"kivi\"$Q --set experiments.0.residual_r" \
                        "$K run $P --set experiments.0.method=$Q\"kivi\"$Q --set experiments.0.residual_rule="
c set-merge-config      "$K merge --config $P --set experiments.0.b"  "$K merge --config $P --set experiments.0.bits="
c stats-formats         "$K stats c.json --format j"                  "$K stats c.json --format json"
c stats-options         "$K stats c.json --for"                       "$K stats c.json --format"
c stats-set-path        "$K stats $P --set data.ke"                   "$K stats $P --set data.keys."
c stats-command         "$K st"                                       "{stats}"

# every option of every command completes (the list comes from kvc)
bad=
for cmd in $("$K" __complete commands); do
    while read -r o v; do
        case "$o" in --*) ;; *) continue ;; esac
        COMP_LINE="$K $cmd $o"; COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _kvc 2>/dev/null
        [[ " ${COMPREPLY[*]} " == *" $o "* ]] || bad="$bad $cmd:$o"
    done < <("$K" __complete options "$cmd")
done
[ -z "$bad" ] && echo "PASS completion-from-kvc-options" || { echo "FAIL completion-from-kvc-options: not offered:$bad"; fail=1; }
# every parameter of every method completes after experiments.0. once experiments.0 has that method
bad=
for m in $("$K" __complete methods); do
    [ "$m" = pipeline ] && continue
    for p in $("$K" methods "$m" --format json | /usr/bin/python3 -c "import json,sys; print(\" \".join(p[\"name\"] for p in json.load(sys.stdin)[\"params\"]))"); do
        COMP_LINE="$K run $P --set experiments.0.method=$Q\"$m\"$Q --set experiments.0.$p"
        COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _kvc 2>/dev/null
        [[ " ${COMPREPLY[*]} " == *" experiments.0.$p"[=.]" "* ]] || bad="$bad $m.$p"
    done
done
[ -z "$bad" ] && echo "PASS completion-from-kvc-method-params" || { echo "FAIL completion-from-kvc-method-params: not offered:$bad"; fail=1; }
exit $fail
' || fail=1

# ---- a real interactive bash on a pseudo-terminal: type, press TAB, print the words the shell passes
KVC=$KVC BC=$BC /usr/bin/python3 - <<'EOF' || fail=1
import os, pty, select, sys, time

kvc, bc = os.environ["KVC"], os.environ["BC"]
cases = [
    ("readline-set-method", "run configs/practice.json --set experiments.0.method=q",
     ["run", "configs/practice.json", "--set", 'experiments.0.method="quantize"']),
    ("readline-set-path", "run configs/practice.json --set data.tok",
     ["run", "configs/practice.json", "--set", "data.tokens=7"]),   # 7 typed after the completion
]

def interact(typed, tail, want_s):
    """Types everything at once (readline completes at the TAB before it reads on) and reads until the printed
    words appear, or 20 s."""
    pid, fd = pty.fork()
    if pid == 0:
        env = dict(os.environ, PS1="$ ", TERM="dumb", INPUTRC="/dev/null", HISTFILE="/dev/null")
        os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
    keys = "bind 'set bell-style none'\n"
    if bc:
        keys += ". %s\n" % bc
    keys += ". scripts/kvc-completion.bash\n"
    # the line and TAB; then the start of the line, a command that prints each word the shell passes, a marker
    keys += "%s %s\t%s\x01printf '<%%s>' \x05; echo '<end>'\nexit\n" % (kvc, typed, tail)
    os.write(fd, keys.encode())
    out, end = b"", time.time() + 20
    while time.time() < end and want_s.encode() not in out and b"<end>\r\n" not in out.split(b"echo '<end>'")[-1]:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    return out.decode("utf-8", "replace")

fail = 0
for name, typed, want in cases:
    want_s = "<%s>" % kvc + "".join("<%s>" % w for w in want) + "<end>"
    try:
        text = interact(typed, "7" if name.endswith("path") else "", want_s)
    except OSError as e:
        print("SKIP completion-%s: no pseudo-terminal here (%s)" % (name, e))
        continue
    if want_s in text:
        print("PASS completion-%s" % name)
    else:
        tail = text[-400:].replace("\r", "").replace("\n", "\\n")
        print("FAIL completion-%s: wanted %s in the output; it ends %r" % (name, want_s, tail))
        fail = 1
sys.exit(fail)
EOF
exit ${fail:-0}
