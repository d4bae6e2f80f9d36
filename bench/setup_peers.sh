#!/usr/bin/env bash
# Create bench/.venv-peers if missing and install bench/requirements-peers.txt into it when the
# file changed since the last install (a hash kept in the venv). The peers never enter .venv.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv-peers
STAMP="$VENV/.requirements.sha256"
PYTHON=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating bench/$VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
wanted=$(cat requirements-peers.txt "$VENV/pyvenv.cfg" | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
    exit 0
fi
echo "==> installing bench/requirements-peers.txt into bench/$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r requirements-peers.txt
echo "$wanted" >"$STAMP"
