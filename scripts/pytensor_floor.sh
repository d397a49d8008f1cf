#!/usr/bin/env bash
# Run a smoke subset of the tests against the lowest pytensor pyproject.toml accepts.
#
#   scripts/pytensor_floor.sh [pytest args]     (default: the smoke files below, on 2 workers)
#
# Builds .venv-pytensor-floor/: a virtualenv holding only pytensor==$PYTENSOR_FLOOR (one
# wheel, --no-deps) and a .pth file naming .venv's site-packages and this checkout, so every
# other dependency is .venv's (run scripts/bootstrap.sh first) and no network is needed after
# the first download. Its own PyTensor compile directory (~/.pytensor/floor-<version>, kept
# between runs) keeps the two versions' numba disk caches apart. scripts/test.sh calls it on
# a full run (no arguments).
#
# Environment: PYTENSOR_FLOOR (default: the lower bound of pyproject.toml's pytensor range).
set -euo pipefail
cd "$(dirname "$0")/.."

floor=${PYTENSOR_FLOOR:-$(sed -n 's/.*"pytensor>=\([0-9.]*\),.*/\1/p' pyproject.toml)}
if [ -z "$floor" ]; then
    echo "pytensor_floor.sh: no 'pytensor>=X,' in pyproject.toml; set PYTENSOR_FLOOR" >&2
    exit 2
fi
env_dir=.venv-pytensor-floor
py=$env_dir/bin/python
site_main=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

if [ ! -x "$py" ] || [ "$("$py" -c 'import pytensor; print(pytensor.__version__)' 2>/dev/null)" != "$floor" ]; then
    rm -rf "$env_dir"
    .venv/bin/python -m venv --without-pip "$env_dir"
    # before the .pth exists, so pip sees no pytensor in the new environment
    .venv/bin/python -m pip --python "$py" install --quiet --no-deps "pytensor==$floor"
fi
site_floor=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$site_main" "$PWD" > "$site_floor/zz_reuse_dot_venv.pth"

"$py" - "$floor" "$site_floor" <<'EOF'
import sys
import pytensor, ptnumba_codegen
floor, site = sys.argv[1:]
assert pytensor.__version__ == floor and pytensor.__file__.startswith(site), (pytensor.__version__, pytensor.__file__)
print(f"pytensor {pytensor.__version__} ({pytensor.__file__}), ptnumba_codegen from {ptnumba_codegen.__file__}")
EOF

if [ $# -eq 0 ]; then
    set -- -n 2 -q tests/test_seed_and_ir.py tests/test_mode.py tests/test_switch.py tests/test_cache.py tests/test_policy.py \
        tests/test_compact_guard.py tests/test_compact_stock_bits.py
fi
export PYTENSOR_FLAGS="${PYTENSOR_FLAGS:+$PYTENSOR_FLAGS,}base_compiledir=$HOME/.pytensor/floor-$floor"
exec "$py" -m pytest "$@"
