#!/usr/bin/env bash
# Create .venv-clients/: an optional environment for the client checks and benchmark
# (scripts/clients_check.py, scripts/clients_bench.sh; docs/clients.md), separate from .venv.
#
#   bash scripts/clients_env.sh
#
# Python 3.12 (found as scripts/bootstrap.sh finds it), PyMC 6.3.2 (the PyMC that
# pymc-marketing 1.3 and pymc-extras 0.15 install with), pymc-marketing 1.3.x,
# pymc-extras 0.15.x, nutpie, jax, and this checkout (`pip install -e .`), all resolved by
# one pip call so every pin, this project's pytensor range included, constrains the others.
# Safe to re-run: it reinstalls only when the pins or pyproject.toml changed or the
# environment is broken. Ends by printing the resolved versions and checking that the
# pytensor resolved is within pyproject.toml's range and that ptnumba_codegen imports.
#
# Environment: PYTHON (a Python 3.12 to use), CLIENTS_VENV (default .venv-clients).
set -euo pipefail
cd "$(dirname "$0")/.."

env_dir=${CLIENTS_VENV:-.venv-clients}
py=$env_dir/bin/python
pins=("pymc==6.3.2" "pymc-marketing>=1.3,<1.4" "pymc-extras>=0.15,<0.16" "nutpie>=0.16" "jax")

is_312() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' >/dev/null 2>&1; }

. scripts/find_python.sh

if [ ! -x "$py" ] || ! is_312 "$py"; then
    rm -rf "$env_dir"
    base=$(find_python is_312)
    echo "creating $env_dir with $base ($("$base" --version))" >&2
    "$base" -m venv "$env_dir"
fi

stamp=$env_dir/.clients_installed
want=$( (printf '%s\n' "${pins[@]}"; cat pyproject.toml) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] \
    || ! "$py" -c "import ptnumba_codegen, pymc_marketing, pymc_extras, nutpie, jax" >/dev/null 2>&1; then
    "$py" -m pip install --quiet --upgrade pip
    "$py" -m pip install --quiet -e ".[nutpie,jax]" "${pins[@]}"
    echo "$want" > "$stamp"
fi

"$py" - <<'EOF'
import re
import tomllib
from importlib.metadata import version

from packaging.specifiers import SpecifierSet

import ptnumba_codegen  # noqa: F401  (imports in this environment)

names = ["pymc", "pytensor", "pymc-marketing", "pymc-extras", "nutpie", "jax", "jaxlib",
         "numba", "llvmlite", "numpy", "scipy", "ptnumba_codegen"]
print("clients environment: " + ", ".join(f"{n} {version(n)}" for n in names))
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
wanted = SpecifierSet(next(re.match(r"pytensor\s*(.*)", d).group(1) for d in deps if d.startswith("pytensor")))
assert version("pytensor") in wanted, f"pytensor {version('pytensor')} is outside pyproject.toml's {wanted}"
EOF
