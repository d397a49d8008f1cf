"""Extreme inputs through the stable formulas PyMC relies on, and their gradients:
the non-finite pattern must be the C backend's, finite values within 1e-12 relative,
under ``rewritten`` (decisions from the rewritten graph) and with decisions as written (``default``,
alias ``as_written``)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from conftest import assert_no_fallback, compile_fn
from ptnumba_codegen.as_written.freeze import INLINED_ATTR
from ptnumba_codegen.as_written.op import AsWritten

ROWS = np.array(
    [
        [1000.0, 1000.0, -1000.0],
        [-1000.0, -1000.0, -1e308],
        [0.0, -np.inf, 1.0],
        [710.0, 709.0, 0.0],
        [1e-300, -1e-300, 0.0],
    ]
)


def graphs():
    X = pt.matrix("X")
    x = pt.vector("x")
    a, b = pt.vectors("a", "b")
    flat = ROWS.ravel()
    neg = -np.abs(flat)  # log1mexp's domain
    return {
        "logsumexp": ([X], [pt.logsumexp(X, axis=1), pytensor.grad(pt.logsumexp(X, axis=1).sum(), X)], [ROWS]),
        "softmax": ([X], [pt.special.softmax(X, axis=1), pytensor.grad((pt.special.softmax(X, axis=1) * X).sum(), X)], [ROWS]),
        "log_softmax": ([X], [pt.special.log_softmax(X, axis=1), pytensor.grad(pt.special.log_softmax(X, axis=1)[:, 0].sum(), X)], [ROWS]),
        "softplus": ([x], [pt.softplus(x), pytensor.grad(pt.softplus(x).sum(), x)], [flat]),
        "sigmoid": ([x], [pt.sigmoid(x), pytensor.grad(pt.sigmoid(x).sum(), x)], [flat]),
        "log1mexp": ([x], [pt.log1mexp(x), pytensor.grad(pt.log1mexp(x).sum(), x)], [neg]),
        "logaddexp": ([a, b], [pt.logaddexp(a, b), *pytensor.grad(pt.logaddexp(a, b).sum(), [a, b])], [ROWS[:, 0], ROWS[:, 1]]),
        # decisions on computed values: as written, these are frozen copies
        "logsumexp_scaled": ([X], [pt.logsumexp(X * 0.5, axis=1), pytensor.grad(pt.logsumexp(X * 0.5, axis=1).sum(), X)], [ROWS]),
        "naive_softplus_max": ([x], [pt.maximum(pt.log(1 + pt.exp(x)), 0.5), pytensor.grad(pt.maximum(pt.log(1 + pt.exp(x)), 0.5).sum(), x)], [flat]),
    }


FROZEN = {"logsumexp_scaled", "naive_softplus_max"}


GRAPHS = graphs()


@pytest.mark.parametrize("backend", ["policy_rewritten", "policy_as_written"])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_extremes_match_c_backend(name, backend):
    ins, outs, vals = GRAPHS[name]
    with np.errstate(all="ignore"):
        ref = compile_fn(ins, outs, "c", cache_key=("extreme", name))(*vals)
        fn = compile_fn(ins, outs, backend, cache_key=("extreme", name))
        res = fn(*vals)
    assert_no_fallback(fn)
    if backend == "policy_as_written" and name in FROZEN:
        copies = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, AsWritten)]
        assert copies or getattr(fn.maker.fgraph, INLINED_ATTR, None)
    for k, (r, e) in enumerate(zip(res, ref, strict=True)):
        r, e = np.asarray(r), np.asarray(e)
        label = f"{name} output {k}: {r} vs C {e}"
        np.testing.assert_array_equal(np.isnan(r), np.isnan(e), err_msg=label)
        np.testing.assert_array_equal(np.isposinf(r), np.isposinf(e), err_msg=label)
        np.testing.assert_array_equal(np.isneginf(r), np.isneginf(e), err_msg=label)
        finite = np.isfinite(e)
        np.testing.assert_allclose(r[finite], e[finite], rtol=1e-12, atol=0, err_msg=label)
