#!/bin/sh
# bootstrap.sh: install what kvc needs on Debian 12 (idempotent), build it, and run the lesson config.
#   scripts/bootstrap.sh            install + build + ./kvc run configs/lesson.json
#   scripts/bootstrap.sh --deps     install only (used by .ci/run)
# Packages already present are not reinstalled; without root or sudo it prints the exact command to run.
set -eu
cd "$(dirname "$0")/.."

# parallel (GNU parallel) and gnuplot-nox: scripts/sweep-parallel.sh, scripts/plot-*.sh and their tests
PKGS="build-essential pkg-config libopenblas-dev liblapacke-dev libcjson-dev python3-numpy parallel gnuplot-nox valgrind bash-completion"

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
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2
else
    echo "kvc bootstrap: all packages present" >&2
fi

[ "${1:-}" = "--deps" ] && exit 0

make -j2 kvc >&2
./kvc run configs/lesson.json
