"""Regressions for what the differential fuzzer (tests/test_fuzz.py) found, one test each."""

import numpy as np
import pytensor.tensor as pt

from conftest import assert_no_fallback, assert_same_bits, compile_fn


def test_max_and_min_over_bools():
    """A bool is an i1: compared signed, True is -1 and max(True, False) was False (for
    CAReduce and fused reductions, full and partial)."""
    i = pt.matrix("i", dtype="int32")
    b = pt.matrix("b", dtype="bool")
    outs = [
        pt.max(pt.le(pt.ge(i, 3.0), 1e-300), axis=1),  # the fuzzer's graph (fused)
        pt.max(b), pt.min(b), pt.max(b, axis=0), pt.min(b, axis=1),  # CAReduce
        pt.max(b & (i > 0)), pt.min(b | (i > 0), axis=0),  # fused
    ]
    vals = [np.array([[1, 5, 3], [0, 2, 9]], dtype="int32"), np.array([[True, False, True], [False, False, True]])]
    ref = compile_fn([i, b], outs, "stock_strict", cache_key="bool_maxmin")(*vals)
    for backend in ("policy_strict", "policy_default"):
        fn = compile_fn([i, b], outs, backend, cache_key="bool_maxmin")
        assert_no_fallback(fn)
        for r, e in zip(fn(*vals), ref, strict=True):
            assert_same_bits(r, e)
