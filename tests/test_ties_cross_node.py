"""Ties in float32 and float64 matrices, with the comparison in the same node or in another
one (after a reshape, a transpose pair or a slice): decisions and gradient zero patterns
equal stock numba with fastmath off; values agree to 1e-12 (1e-6 for float32)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import compile_fn

spec = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["float64", "float32"]),
        "k": st.integers(3, 5),
        "ops": st.lists(
            st.sampled_from(["mul", "div", "add", "sub"]), min_size=4, max_size=4
        ),
        "decision": st.sampled_from(
            ["minimum", "maximum", "le", "gt", "eq", "clip", "switch"]
        ),
        "cross": st.sampled_from(["none", "reshape", "dimshuffle", "subtensor"]),
    }
)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(specs=st.lists(spec, min_size=4, max_size=4), seed=st.integers(0, 2**31))
def test_ties_float32_broadcast_and_cross_node(specs, seed):
    rng = np.random.default_rng(seed)
    xs_all, bs, outs, exprs = [], [], [], []
    for s in specs:
        xs = [pt.matrix(f"x{len(xs_all)}_{i}", dtype=s["dtype"]) for i in range(s["k"])]
        b = pt.matrix(f"b{len(bs)}", dtype=s["dtype"])
        acc = xs[0]
        for op, x in zip(s["ops"], xs[1:]):
            acc = {"mul": acc * x, "div": acc / x, "add": acc + x, "sub": acc - x}[op]
        p = acc
        if s["cross"] == "reshape":
            q = p.reshape((-1,)).reshape(p.shape)
        elif s["cross"] == "dimshuffle":
            q = p.T.T
        elif s["cross"] == "subtensor":
            q = p[:, ::1]
        else:
            q = p
        d = s["decision"]
        if d in ("minimum", "maximum"):
            out = getattr(pt, d)(q, b)
        elif d == "clip":
            out = pt.clip(q, -1e9, b)
        elif d == "switch":
            out = pt.switch(pt.le(q, b), xs[0] * 3.0, xs[1] * -2.0)
        else:
            out = getattr(pt, d)(q, b)
        outs.append(out)
        if out.dtype.startswith("float"):
            outs.extend(pytensor.grad(out.sum(), [xs[0], b]))
        xs_all += xs
        bs.append(b)
        exprs.append(p)
    vals = [rng.uniform(0.5, 2.0, (3, 5)).astype(v.dtype) for v in xs_all]
    ef = compile_fn(xs_all, exprs, "stock_strict", on_unused_input="ignore")
    th = [np.asarray(t).copy() for t in ef(*vals)]
    for t in th:
        t.flat[1::3] = np.nextafter(t.flat[1::3], np.inf)
    ref = compile_fn(xs_all + bs, outs, "stock_strict", on_unused_input="ignore")(
        *vals, *th
    )
    fn = compile_fn(xs_all + bs, outs, "policy_rewritten", on_unused_input="ignore")
    res = fn(*vals, *th)
    for k, (a, e) in enumerate(zip(res, ref)):
        a, e = np.asarray(a), np.asarray(e)
        if a.dtype.kind == "b":
            np.testing.assert_array_equal(a, e, err_msg=str((k, specs)))
        else:
            np.testing.assert_array_equal(a == 0, e == 0, err_msg=str((k, specs)))
            np.testing.assert_allclose(
                a,
                e,
                rtol=1e-12 if a.dtype == np.float64 else 1e-6,
                err_msg=str((k, specs)),
            )
