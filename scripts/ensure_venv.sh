#!/usr/bin/env bash
# Create .venv (Python 3.11 or newer) if it is missing, and install requirements.txt into it
# when the file changed since the last install (a hash kept in .venv/.requirements.sha256).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
STAMP="$VENV/.requirements.sha256"

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

wanted=$(cat requirements.txt "$VENV/pyvenv.cfg" | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
    exit 0
fi
say "installing requirements.txt into $VENV"
# This machine's pip configuration may name local indexes that do not exist: pip warns about each
# of them for every package, which buries what matters.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r requirements.txt 2>&1 | { grep -v "is neither a file nor a directory" || true; }
echo "$wanted" >"$STAMP"
