#!/usr/bin/env bash
# Set up .venv (Python 3.12) and run the test suite on 2 workers.
#
# With no arguments (a full run, what CI runs) it first runs a smoke subset against the
# lowest pytensor pyproject.toml accepts (scripts/pytensor_floor.sh), then the whole suite
# against .venv's pytensor (the highest). Arguments go to pytest and skip the smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest -n 2 -q "$@"
fi
floor=0
echo "== smoke tests on the lowest supported pytensor (scripts/pytensor_floor.sh) =="
bash scripts/pytensor_floor.sh || floor=$?
echo "== the full suite on .venv's pytensor =="
status=0
.venv/bin/python -m pytest -n 2 -q --durations=15 || status=$?
if [ "$floor" != 0 ]; then
    echo "test.sh: the smoke run on the lowest pytensor failed (exit $floor)" >&2
    [ "$status" != 0 ] || status=$floor
fi
exit $status
