#!/usr/bin/env bash
# Create the project-local virtualenv .venv with a Python >= 3.12 and install the project
# (editable, with the test extra). Safe to re-run: it only reinstalls when pyproject.toml
# changed or the venv is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

is_312_plus() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
    local c candidates=()
    [ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
    candidates+=(python3.12 python3.13 python3)
    if command -v pyenv >/dev/null 2>&1; then
        local root; root=$(pyenv root)
        # pyenv's python3.12 shim only works with PYENV_VERSION set: use the binaries directly
        for c in "$root"/versions/3.12*/bin/python3.12 "$root"/versions/3.13*/bin/python3.13; do
            [ -x "$c" ] && candidates+=("$c")
        done
    fi
    candidates+=(/usr/bin/python3.12 /usr/local/bin/python3.12)
    for c in "${candidates[@]}"; do
        if command -v "$c" >/dev/null 2>&1 && is_312_plus "$c"; then
            command -v "$c"; return 0
        fi
    done
    echo "error: no Python >= 3.12 found (tried: ${candidates[*]}); set PYTHON=/path/to/python3.12" >&2
    return 1
}

if [ ! -x .venv/bin/python ] || ! is_312_plus .venv/bin/python; then
    rm -rf .venv
    py=$(find_python)
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
