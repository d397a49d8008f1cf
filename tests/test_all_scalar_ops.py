"""Every scalar op of pytensor.scalar.basic and .math that the stock numba backend lowers
on float64 is lowered by the generator (natively, or by calling the stock function from our
loop) and matches stock numba with fastmath off."""

import numpy as np
import pytensor.scalar.basic as psb
import pytensor.scalar.math as psm
import pytensor.tensor as pt
from pytensor.scalar.basic import Composite, ScalarOp
from pytensor.scalar.loop import ScalarLoop
from pytensor.tensor.elemwise import Elemwise

from conftest import assert_no_fallback, compile_fn


def scalar_ops():
    ops = {}
    for mod in (psb, psm):
        for obj in vars(mod).values():
            if isinstance(obj, ScalarOp) and not isinstance(obj, Composite | ScalarLoop):
                ops.setdefault(type(obj).__name__, obj)
    return dict(sorted(ops.items()))


def build():
    inputs, outputs, names = [], [], []
    for name, op in scalar_ops().items():
        spec = getattr(op, "nfunc_spec", None)
        nin = op.nin if op.nin > 0 else (spec[1] if spec else 2)
        xs = [pt.vector(f"{name}_{i}") for i in range(nin)]
        try:
            out = Elemwise(op)(*xs)
        except (TypeError, ValueError):
            continue  # not defined on float64 inputs (bit ops, discrete orders, ...)
        out = out[0] if isinstance(out, list | tuple) else out
        if out.dtype.startswith("complex"):
            continue
        inputs += xs
        outputs.append(out)
        names.append((name, nin))
    return inputs, outputs, names


def test_every_float_scalar_op_matches_stock():
    inputs, outputs, names = build()
    assert len(names) >= 80
    vals = [np.linspace(0.1, 0.9, 7) + 0.01 * i for _, nin in names for i in range(nin)]
    assert len(vals) == len(inputs)
    fn = compile_fn(inputs, outputs, "policy_rewritten", cache_key="allops", on_unused_input="ignore")
    assert_no_fallback(fn)
    ref = compile_fn(inputs, outputs, "stock_strict", cache_key="allops", on_unused_input="ignore")
    with np.errstate(all="ignore"):
        res, expected = fn(*vals), ref(*vals)
    for (name, _), a, b in zip(names, res, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0, equal_nan=True, err_msg=name)
