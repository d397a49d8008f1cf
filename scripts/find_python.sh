# Sourced by scripts/bootstrap.sh and scripts/clients_env.sh: `find_python CHECK` prints the
# first Python interpreter for which the shell function CHECK succeeds, trying $PYTHON,
# python3.12/3.13/3 on PATH, pyenv's installed 3.12/3.13 binaries, then /usr/bin and
# /usr/local/bin; it fails with the list it tried.

find_python() {
    local check=$1 c candidates=()
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
        if command -v "$c" >/dev/null 2>&1 && "$check" "$c"; then
            command -v "$c"; return 0
        fi
    done
    echo "error: no Python accepted by $check found (tried: ${candidates[*]}); set PYTHON=/path/to/python3.12" >&2
    return 1
}
