#!/usr/bin/env bash
# Create the project-local virtualenv .venv with a Python >= 3.12 and install the project
# (editable, with the test extra). Safe to re-run: it only reinstalls when pyproject.toml
# changed or the venv is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

is_312_plus() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

. scripts/find_python.sh

if [ ! -x .venv/bin/python ] || ! is_312_plus .venv/bin/python; then
    rm -rf .venv
    py=$(find_python is_312_plus)
    echo "creating .venv with $py ($("$py" --version))" >&2
    "$py" -m venv .venv
fi

stamp=.venv/.ptnumba_installed
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c "import ptnumba_codegen" >/dev/null 2>&1; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[test,nutpie]"
    echo "$want" > "$stamp"
fi
