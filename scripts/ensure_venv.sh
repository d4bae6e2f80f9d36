#!/usr/bin/env bash
# Create .venv (Python 3.11 or newer) if it is missing, and install a requirements file into
# it when that file (or requirements.txt, which it includes) changed since its last install (a
# hash kept in .venv/.<file>.sha256).
#
#   scripts/ensure_venv.sh                        the runtime: requirements.txt (make demo)
#   scripts/ensure_venv.sh requirements-dev.txt   the runtime, tests and tools (make test, lint)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
REQUIREMENTS=${1:-requirements.txt}

say() { echo "==> $*"; }
die() { echo "==> error: $*" >&2; exit 2; }

pick_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

create_venv() {
    local python
    python=$(pick_python) || die "Python 3.11 or newer is needed: install python3.11 (apt-get install python3 python3-venv)"
    say "creating $VENV with $($python --version 2>&1)"
    if "$python" -m venv "$VENV" 2>/dev/null; then
        return 0
    fi
    # Debian keeps ensurepip in a separate package; without it `python -m venv` fails.
    rm -rf "$VENV"
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        local version
        version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        "$python" scripts/ensure_services.py apt "python$version-venv" ||
            die "could not install python$version-venv with apt-get"
        "$python" -m venv "$VENV" || die "python -m venv failed even with python$version-venv"
    else
        die "'$python -m venv' failed: install python3-venv (apt-get install python3-venv)"
    fi
}

if [ ! -x "$VENV/bin/python" ]; then
    create_venv
fi

# The runtime file is part of every set (requirements-dev.txt starts with `-r requirements.txt`).
digest() { cat requirements.txt "$1" "$VENV/pyvenv.cfg" | sha256sum | cut -d' ' -f1; }
stamp() { echo "$VENV/.${1%.txt}.sha256"; }

wanted=$(digest "$REQUIREMENTS")
if [ -f "$(stamp "$REQUIREMENTS")" ] && [ "$(cat "$(stamp "$REQUIREMENTS")")" = "$wanted" ]; then
    exit 0
fi
say "installing $REQUIREMENTS into $VENV (pip's progress follows)"
# This machine's pip configuration may name local indexes that do not exist: pip warns about each
# of them for every package, which buries what matters. Unbuffered, so each line shows at once.
PYTHONUNBUFFERED=1 "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input \
    -r "$REQUIREMENTS" 2>&1 | { grep --line-buffered -v "is neither a file nor a directory" || true; }
echo "$wanted" >"$(stamp "$REQUIREMENTS")"
# A set that includes the runtime installed it too.
if [ "$REQUIREMENTS" != requirements.txt ]; then
    digest requirements.txt >"$(stamp requirements.txt)"
fi
