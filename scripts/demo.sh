#!/usr/bin/env bash
# Set up .venv (Python 3.12) and run the demo: the seed example plus a short speed table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m ptnumba_codegen demo "$@"
