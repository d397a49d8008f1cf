#!/usr/bin/env bash
# Set up .venv (Python 3.12) and run the test suite on 2 workers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest -n 2 -q "$@"
