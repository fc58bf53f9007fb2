#!/bin/sh
# bootstrap.sh: install what kvc needs on Debian 12 (idempotent), build it, and run the lesson config.
#   scripts/bootstrap.sh            install + build + ./kvc run configs/lesson.json
#   scripts/bootstrap.sh --deps     install only (used by .ci/run)
# Packages already present are not reinstalled; without root or sudo it prints the exact command to run.
# Another apt or dpkg at work (unattended-upgrades, a second terminal) is waited for, up to 10 minutes.
set -eu
cd "$(dirname "$0")/.."

# python3-numpy: the tests run Debian's /usr/bin/python3 with it (not a python3 first on PATH); python3-torch: the
# PyTorch references of the model engine (tests/test_model_torch.py, test_model_run.py, test_stats.py) and make models
# parallel (GNU parallel), gnuplot-nox: scripts/sweep-parallel.sh, scripts/plot-*.sh and their tests
# slurm-wlm, munge: tests/test_slurm.sh starts a private single-node Slurm to test scripts/sweep-slurm.sh
# man-db: man ./man/kvc.1; valgrind: the memory checks of make sanitize; bash-completion: tests/test_completion.sh
PKGS="build-essential pkg-config libopenblas-dev liblapacke-dev libcjson-dev python3-numpy parallel gnuplot-nox
valgrind man-db slurm-wlm munge bash-completion python3-torch"
LOCK_WAIT=600   # seconds

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "kvc bootstrap: missing packages:$missing" >&2
        echo "kvc bootstrap: run as root:  apt-get update && apt-get install -y$missing" >&2
        exit 1
    fi
    echo "kvc bootstrap: installing$missing" >&2
    # apt-get waits for the dpkg lock with DPkg::Lock::Timeout, but `update` fails at once on a held lock of
    # the package lists (apt 2.6): try again every 5 s
    waited=0
    while ! out=$($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=$LOCK_WAIT update -q 2>&1); do
        if ! printf '%s\n' "$out" | grep -q 'Could not get lock' || [ $waited -ge $LOCK_WAIT ]; then
            printf '%s\n' "$out" >&2
            exit 1
        fi
        [ $waited -eq 0 ] && echo "kvc bootstrap: another apt holds the package lists; waiting (at most $LOCK_WAIT s)" >&2
        sleep 5
        waited=$((waited + 5))
    done
    printf '%s\n' "$out" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=$LOCK_WAIT install -y -q \
        --no-install-recommends $missing >&2
else
    echo "kvc bootstrap: all packages present" >&2
fi

[ "${1:-}" = "--deps" ] && exit 0

make -j2 kvc >&2
./kvc run configs/lesson.json
