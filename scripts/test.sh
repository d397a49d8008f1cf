#!/usr/bin/env bash
# Set up .venv (Python 3.12) and run the test suite on 2 workers.
#
# With no arguments (a full run, what CI runs) it first runs a smoke subset against the
# lowest pytensor pyproject.toml accepts (scripts/pytensor_floor.sh), then the whole suite
# against .venv's pytensor (the highest), then a part of PyMC's distribution tests under the
# policy (scripts/pymc_conformance.py: the tests of scripts/pymc_ci_stock_passes.txt, which
# pass under stock, must pass) when ../shared/pymc_tests is there. Arguments go to pytest
# and skip the smoke run and PyMC's tests.
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
pymc=0
pymc_tests=../shared/pymc_tests
echo "== PyMC's distribution tests under the policy (scripts/pymc_conformance.py) =="
if [ -d "$pymc_tests" ]; then
    .venv/bin/python scripts/pymc_conformance.py "$pymc_tests" --stock-passes scripts/pymc_ci_stock_passes.txt || pymc=$?
else
    echo "test.sh: $pymc_tests not found (PyMC's tests, read-only, beside the checkout): skipped"
fi
if [ "$floor" != 0 ]; then
    echo "test.sh: the smoke run on the lowest pytensor failed (exit $floor)" >&2
    [ "$status" != 0 ] || status=$floor
fi
if [ "$pymc" != 0 ]; then
    echo "test.sh: PyMC's distribution tests under the policy failed (exit $pymc)" >&2
    [ "$status" != 0 ] || status=$pymc
fi
exit $status
