#!/bin/sh
# test_slurm.sh: scripts/sweep-slurm.sh against a real single-node Slurm (Debian's slurm-wlm and munge).
# The test starts its own munged, slurmctld and slurmd, as root, on free ports, with config, state, spool and
# logs in a temporary directory (the recipe of README "Scale-out"), and stops them by PID at the end. Where it
# cannot (not root, not installed, the daemons do not come up) it prints "SKIP slurm: <why>" and exits 0.
# Checks: a sweep in 3 shards runs and its merge equals `kvc run --no-timing` byte for byte (kvc run options
# passed through, before and after --); a resubmission resumes, and the task logs keep kvc's notes (a torn last
# line removed); a failing shard and a cancelled one make the merge job end (FAILED, not waiting) with a log
# naming both shards. Prints "PASS name" / "FAIL name: why"; exits 1 if any check failed. Run from the
# project root; about 20 s.
KVC=${KVC:-./kvc}
KVC=$(cd "$(dirname "$KVC")" && pwd)/$(basename "$KVC")
G=tests/data/sweep/grid.json      # 23 rows
PATH=$PATH:/usr/sbin:/sbin
fail=0
pass() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; fail=1; }
skip() { echo "SKIP slurm: $*"; exit 0; }
# Slurm's clients retry for minutes when the controller is gone: every call is bounded
sl() { timeout 20 "$@"; }
alive() { [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]; }   # a zombie child is gone

[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd starts the jobs as their user); run make test as root"
for c in munged slurmctld slurmd sbatch squeue scontrol scancel sinfo timeout; do
    command -v $c >/dev/null 2>&1 ||
        skip "$c is not installed (Debian: apt-get install slurm-wlm munge, or scripts/bootstrap.sh --deps)"
done

# ---- a private Slurm: munged, slurmctld, slurmd in the foreground, children of this shell ----
tmp=$(mktemp -d)
chmod 755 "$tmp"   # munged wants the directory of its socket open to all
pids="" ctld=""
stop() {
    if [ -n "$ctld" ] && alive "$ctld"; then
        timeout 5 scancel --quiet --user=root 2>/dev/null   # any job left (a failed check): our controller only
        i=0; while [ $i -lt 50 ] && [ -n "$(timeout 2 squeue -h -o %i 2>/dev/null)" ]; do sleep 0.1; i=$((i + 1)); done
    fi
    for p in $pids; do kill "$p" 2>/dev/null; done        # slurmd, slurmctld, munged
    for p in $pids; do
        i=0; while [ $i -lt 50 ] && alive "$p"; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 1' INT TERM HUP PIPE   # a killed test stops its daemons too
mkdir -p "$tmp/munge-key" "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/out"
chmod 700 "$tmp/munge-key"; chmod 755 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge-key/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$tmp/munge-key/munge.key"
sock=$tmp/munge/munge.socket
munged -F --socket="$sock" --key-file="$tmp/munge-key/munge.key" --pid-file="$tmp/munge/munged.pid" \
    --seed-file="$tmp/munge/munged.seed" --log-file="$tmp/log/munged.log" > "$tmp/log/munged.out" 2>&1 &
pids="$!"
i=0; while [ $i -lt 50 ] && [ ! -S "$sock" ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$sock" ] || skip "munged did not start: $(tail -n 2 "$tmp/log/munged.out" "$tmp/log/munged.log" 2>/dev/null | tr '\n' ' ')"

# two free TCP ports (the kernel's choice), else two random ones
ports=$(/usr/bin/python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])' 2>/dev/null) ||
    ports="$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000 * 2 )) $(( 20001 + $(od -An -N2 -tu2 /dev/urandom) % 20000 * 2 ))"
set -- $ports
host=$(hostname -s)
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
export SLURM_CONF="$tmp/slurm.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=kvctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName=kvcnode NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=kvc Nodes=kvcnode Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" > "$tmp/log/slurmctld.out" 2>&1 &
ctld=$!; pids="$ctld $pids"
slurmd -D -N kvcnode -f "$SLURM_CONF" > "$tmp/log/slurmd.out" 2>&1 &
slurmd=$!; pids="$slurmd $pids"
end=$(($(date +%s) + 15))
while alive $ctld && alive $slurmd && [ "$(date +%s)" -lt $end ] &&
    [ "$(timeout 2 sinfo -h -n kvcnode -o %t 2>/dev/null)" != idle ]; do sleep 0.1; done
alive $ctld && alive $slurmd && [ "$(timeout 2 sinfo -h -n kvcnode -o %t 2>/dev/null)" = idle ] ||
    skip "slurmctld and slurmd did not come up (one died, or the node was not idle within 15 s): \
$(tail -n 3 "$tmp/log/slurmctld.log" "$tmp/log/slurmd.log" "$tmp/log/slurmctld.out" "$tmp/log/slurmd.out" 2>/dev/null | tr '\n' ' ')"
pass "slurm-daemons-up (munged, slurmctld :$1, slurmd :$2; $cpus CPUs)"

# wait_jobs IDS SECONDS: until no job of IDS is in the queue; fails after SECONDS
wait_jobs() {
    end=$(($(date +%s) + $2))
    while [ "$(date +%s)" -lt $end ] && [ -n "$(sl squeue -h -j "$1" -o %i 2>/dev/null)" ]; do sleep 0.2; done
    left=$(sl squeue -h -j "$1" -o %i) && [ -z "$left" ]
}
state() { sl scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1; }
# submit NAME SWEEP-SLURM-ARGS...: submits, sets jid and mid, waits for both jobs (at most 40 s)
submit() {
    name=$1; shift
    jid="" mid=""
    if ! sl scripts/sweep-slurm.sh "$@" > "$tmp/jobs" 2> "$tmp/submit.err"; then
        bad "$name" "sweep-slurm.sh failed: $(cat "$tmp/submit.err")"; return 1
    fi
    read -r jid mid < "$tmp/jobs"
    wait_jobs "$jid,$mid" 40 || { bad "$name" "jobs $jid, $mid still queued after 40 s: $(sl squeue)"; return 1; }
}

# ---- a sweep in 3 shards equals the single-process run ----
"$KVC" run $G --no-timing --set 'experiments.0.axis="channel"' --format csv > "$tmp/ref.csv"
R=$tmp/out/r.csv
if submit slurm-sweep -n 3 --kvc "$KVC" $G "$R" --no-timing --set 'experiments.0.axis="channel"'; then
    if [ "$(state "$mid")" = COMPLETED ] && cmp -s "$R" "$tmp/ref.csv" &&
        grep -q "all 3 shards succeeded; merging them into $R" "$R.shards/slurm-$mid.out"; then
        pass "slurm-sweep-equals-single-run (array $jid, merge $mid: 23 rows, ids and values byte for byte)"
    else bad slurm-sweep-equals-single-run "merge job $(state "$mid"): $(cat "$R.shards/slurm-$mid.out" 2>/dev/null)"; fi
    grep -q 'shard 2/3' "$R.shards/slurm-${jid}_2.out"; st=$?
    [ $st -eq 0 ] && [ "$(cat "$R.shards/shard-2-of-3.status")" = 0 ]
    if [ $? -eq 0 ]; then pass slurm-task-log-and-status; else bad slurm-task-log-and-status "$(cat "$R.shards/slurm-${jid}_2.out")"; fi

    # ---- resubmitted after a torn shard file and a lost one: the logs keep kvc's notes ----
    head -c 120 "$R.shards/shard-2-of-3.csv" > "$tmp/torn" && cat "$tmp/torn" > "$R.shards/shard-2-of-3.csv"
    rm -f "$R.shards/shard-3-of-3.csv" "$R"
    if submit slurm-resume -n 3 --kvc "$KVC" $G "$R" --set 'experiments.0.axis="channel"' -- --no-timing; then
        if [ "$(state "$mid")" = COMPLETED ] && cmp -s "$R" "$tmp/ref.csv"; then pass slurm-resume-equals-single-run
        else bad slurm-resume-equals-single-run "merge job $(state "$mid"): $(cat "$R.shards/slurm-$mid.out" 2>/dev/null)"; fi
        grep -q 'removed a torn last line' "$R.shards/slurm-${jid}_2.out" &&
            grep -q 'rows already there; running the other 0' "$R.shards/slurm-${jid}_1.out"
        if [ $? -eq 0 ]; then pass slurm-task-logs-keep-kvc-notes
        else bad slurm-task-logs-keep-kvc-notes "$(cat "$R.shards/slurm-${jid}_1.out" "$R.shards/slurm-${jid}_2.out")"; fi
    fi
fi

# ---- shard 2 fails, shard 3 is cancelled while it runs: the merge job ends and names both ----
cat > "$tmp/kvc-fails" <<EOF
#!/bin/sh
case " \$* " in
    *" --shard 2/3 "*) echo "kvc-fails: shard 2 fails on purpose" >&2; exit 3 ;;
    *" --shard 3/3 "*) echo "kvc-fails: shard 3 waits to be cancelled" >&2; exec sleep 60 ;;
esac
exec "$KVC" "\$@"
EOF
chmod +x "$tmp/kvc-fails"
F=$tmp/out/f.csv
if sl scripts/sweep-slurm.sh -n 3 --kvc "$tmp/kvc-fails" $G "$F" --no-timing > "$tmp/jobs" 2> "$tmp/submit.err"; then
    read -r jid mid < "$tmp/jobs"
    i=0; while [ $i -lt 150 ] && ! grep -qs 'waits to be cancelled' "$F.shards/slurm-${jid}_3.out"; do sleep 0.2; i=$((i + 1)); done
    sl scancel "${jid}_3"
    if wait_jobs "$jid,$mid" 30; then
        log=$F.shards/slurm-$mid.out
        if [ "$(state "$mid")" = FAILED ] && [ ! -e "$F" ] &&
            grep -q "shard 2/3 failed: kvc exited with status 3 in task ${jid}_2" "$log" &&
            grep -q "kvc-fails: shard 2 fails on purpose" "$log" &&
            grep -q "shard 3/3 failed: task ${jid}_3 ended without finishing" "$log" &&
            grep -q "2 of 3 shards failed; not merged" "$log" && ! grep -q 'shard 1/3' "$log"; then
            pass "slurm-failed-shards-end-the-merge (merge job $mid FAILED, its log names shards 2 and 3)"
        else bad slurm-failed-shards-end-the-merge "merge job $(state "$mid"): $(cat "$log" 2>/dev/null)"; fi
    else bad slurm-failed-shards-end-the-merge "jobs $jid, $mid still queued after 30 s: $(sl squeue)"; fi
else bad slurm-failed-shards-end-the-merge "sweep-slurm.sh failed: $(cat "$tmp/submit.err")"; fi

# ---- refused before anything is queued ----
n0=$(sl scontrol show jobs 2>/dev/null | grep -c '^JobId=')
sl scripts/sweep-slurm.sh --kvc "$KVC" $G "$tmp/out/x.csv" --no-timing --threads=2 > /dev/null 2> "$tmp/err"; st=$?
sl scripts/sweep-slurm.sh --kvc "$KVC" $G "$tmp/out/x.csv" --shard 1/2 > /dev/null 2>> "$tmp/err"; st2=$?
n1=$(sl scontrol show jobs 2>/dev/null | grep -c '^JobId=')
if [ $st -eq 2 ] && [ $st2 -eq 2 ] && [ "$n0" = "$n1" ] && grep -q 'leave one of them out' "$tmp/err" &&
    grep -q 'the script sets it' "$tmp/err"; then pass slurm-bad-options-queue-nothing
else bad slurm-bad-options-queue-nothing "status $st and $st2, jobs $n0 -> $n1: $(cat "$tmp/err")"; fi
exit $fail
