#!/usr/bin/env bash
# setup.sh — installs what kvbench builds and runs with, from Debian's packages (and, for the reference
# generators and the llama.cpp benchmark peer, PyPI). Idempotent: skips what is already there.
# Usage: scripts/setup.sh [--python]
#   --python  also installs the Python packages of tests/reference/
# It always installs pdflatex with booktabs (texlive-latex-base and texlive-latex-recommended without their
# recommends, about 65 MB), with which test_report compiles the report's LaTeX (CI runs it; skipped without it).
set -euo pipefail

# clang (with its sanitizer / libFuzzer runtimes and OpenMP) builds `make sanitize` and `make fuzz`: its UBSan
# traps float-cast-overflow, gcc's does not.
debs=(build-essential pkg-config libcjson-dev libsqlite3-dev zlib1g-dev libzip-dev libopenblas-dev
      libgomp1 gnuplot-nox python3 python3-pip sqlite3 clang libclang-rt-dev libomp-dev xz-utils)
missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "setup: Debian packages present"
fi

if ! command -v pdflatex >/dev/null || ! kpsewhich booktabs.sty >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing pdflatex and booktabs"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        texlive-latex-base texlive-latex-recommended >/dev/null
fi

for arg in "$@"; do
    case "$arg" in
    --python) python3 -m pip install -q -r tests/reference/requirements.txt ;;
    esac
done
