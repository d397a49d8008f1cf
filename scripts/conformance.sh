#!/usr/bin/env bash
# Run PyTensor's own numba backend tests twice -- stock, then with policy_codegen in every
# numba mode (-p ptnumba_codegen.tools.pytest_plugin) -- and compare the outcomes.
#
#   scripts/conformance.sh PYTENSOR_CHECKOUT [extra pytest args]
#
# PYTENSOR_CHECKOUT holds PyTensor's tests/ (with its __init__.py and conftest.py files),
# ideally also its top-level conftest.py and pyproject.toml (pytest config:
# xfail_strict = true), and must NOT hold a pytensor/ package: the tests run against the
# pytensor installed in the project's .venv. See docs/conformance.md.
#
# Environment:
#   CONFORMANCE_OUT      output directory (default: /tmp/ptnumba-conformance-<timestamp>)
#   CONFORMANCE_JOBS     xdist workers (default: 2; 0 disables xdist)
#   CONFORMANCE_FILES    space-separated test files relative to the checkout
#                        (default: the numba elemwise/scalar/fused/basic/scan/blockwise tests)
#   CONFORMANCE_RUNS     which passes to run (default: "stock policy")
#   CONFORMANCE_SHARED_CACHE=1  reuse ~/.pytensor (default: a fresh base_compiledir per
#                        pass inside CONFORMANCE_OUT, so both passes compile cold)
#   PTNUMBA_CODEGEN_POLICY      policy for the policy pass (preset name or TOML path; unset:
#                               `default`, decisions as written; `rewritten` for decisions
#                               from the rewritten graph)
#
# Exit status: 1 if a test that passed on stock fails/errors/is missing with the policy, 2 if a
# pytest run could not run (usage/internal error/interrupted), else 0.
set -u -o pipefail

if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
CHECKOUT=$(cd "$1" && pwd)
shift

HERE=$(cd "$(dirname "$0")" && pwd)
PY="$HERE/../.venv/bin/python"
if [ ! -x "$PY" ]; then
    PY=$(command -v python3.12 || true)
fi
if [ -z "$PY" ]; then
    echo "conformance.sh: no python: neither $HERE/../.venv/bin/python nor python3.12" >&2
    exit 2
fi

OUT=${CONFORMANCE_OUT:-/tmp/ptnumba-conformance-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
JOBS=${CONFORMANCE_JOBS:-2}
RUNS=${CONFORMANCE_RUNS:-stock policy}

DEFAULT_FILES="tests/link/numba/test_elemwise.py tests/link/numba/test_scalar.py
tests/link/numba/test_fused_elemwise.py tests/link/numba/test_basic.py
tests/link/numba/test_scan.py tests/link/numba/test_blockwise.py"
FILES=()
for f in ${CONFORMANCE_FILES:-$DEFAULT_FILES}; do
    if [ -f "$CHECKOUT/$f" ]; then
        FILES+=("$f")
    else
        echo "conformance.sh: skipping $f (not in this checkout)"
    fi
done
if [ ${#FILES[@]} -eq 0 ]; then
    echo "conformance.sh: no test files found under $CHECKOUT" >&2
    exit 2
fi

cd "$CHECKOUT" || exit 2
# The tests must import the installed pytensor, not a source tree next to them.
PYTENSOR_AT=$("$PY" -c 'import pytensor, os; print(os.path.dirname(pytensor.__file__))') || exit 2
case "$PYTENSOR_AT" in
    "$CHECKOUT"/*)
        echo "conformance.sh: pytensor resolves to $PYTENSOR_AT inside the checkout;" \
            "use a checkout with tests/ only (see docs/conformance.md)" >&2
        exit 2 ;;
esac
VERSIONS=$("$PY" -c 'import pytensor, numba, llvmlite, ptnumba_codegen as p
print(f"pytensor {pytensor.__version__}, numba {numba.__version__}, llvmlite {llvmlite.__version__}, ptnumba_codegen {p.__version__}")') || exit 2
REVISION=$(cat "$CHECKOUT/REVISION" 2>/dev/null || git -C "$CHECKOUT" rev-parse HEAD 2>/dev/null || echo unknown)
# The generator under test: commit of this repository, and whether its package is edited.
OURS=$(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$HERE/.." status --porcelain -- ptnumba_codegen ':!ptnumba_codegen/tools/pytest_plugin.py' 2>/dev/null)" ]; then
    OURS="$OURS + uncommitted changes in ptnumba_codegen/"
fi

{
    echo "checkout:  $CHECKOUT (tests revision: $REVISION)"
    echo "python:    $PY"
    echo "installed: $VERSIONS ($PYTENSOR_AT)"
    echo "generator: ptnumba_codegen at $OURS"
    echo "policy:    ${PTNUMBA_CODEGEN_POLICY:-default}"
    echo "files:     ${FILES[*]}"
    echo "output:    $OUT"
} | tee -a "$OUT/info.txt"

XDIST=()
if [ "$JOBS" != "0" ]; then
    XDIST=(-n "$JOBS")
fi
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"   # for -p conformance_diff
declare -A RC
for run in $RUNS; do
    PLUGIN=()
    if [ "$run" = policy ]; then
        PLUGIN=(-p ptnumba_codegen.tools.pytest_plugin)
    fi
    FLAGS=${PYTENSOR_FLAGS:-}
    if [ "${CONFORMANCE_SHARED_CACHE:-0}" != 1 ]; then
        FLAGS="${FLAGS:+$FLAGS,}base_compiledir=$OUT/compiledir-$run"
    fi
    echo
    echo "=== $run pass ==="
    start=$(date +%s)
    echo "$run: started $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$OUT/info.txt"
    PYTENSOR_FLAGS="$FLAGS" "$PY" -m pytest \
        --rootdir "$CHECKOUT" -p no:cacheprovider -p conformance_diff "${PLUGIN[@]}" \
        "${XDIST[@]}" -q -rfE -o junit_family=xunit1 --junitxml "$OUT/$run.xml" \
        "${FILES[@]}" "$@" 2>&1 | tee "$OUT/$run.log"
    RC[$run]=$?
    end=$(date +%s)
    echo "$run: pytest exit ${RC[$run]}, wall $((end - start)) s" | tee -a "$OUT/info.txt"
done

status=0
for run in $RUNS; do
    case ${RC[$run]} in
        0 | 1 | 5) ;;
        *) echo "conformance.sh: the $run pass did not complete (pytest exit ${RC[$run]})" >&2
           status=2 ;;
    esac
done

if [ -f "$OUT/stock.xml" ] && [ -f "$OUT/policy.xml" ]; then
    echo
    echo "=== stock vs policy ==="
    "$PY" "$HERE/conformance_diff.py" "$OUT/stock.xml" "$OUT/policy.xml" | tee "$OUT/diff.txt"
    diff_rc=${PIPESTATUS[0]}
    if [ "$diff_rc" != 0 ] && [ "$status" = 0 ]; then
        status=$diff_rc
    fi
fi
echo
echo "results in $OUT (info.txt, {stock,policy}.{log,xml}, diff.txt)"
exit $status
