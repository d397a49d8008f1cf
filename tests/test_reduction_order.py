"""Reductions whose result depends on the order the elements are visited in: every
policy must give stock strict's bits.

* A float max/min over ``-0.0`` and ``+0.0`` returns the zero stock sees first (``1/max``
  is ``-inf`` or ``+inf``); stock's order is the logical one in an elemwise loop, the
  stride order in a CAReduce, and 8 interleaved lanes for a full max/min of a dense
  input with two or more dimensions.
* A float sum without ``reassoc`` (policy ``strict``) rounds like stock only in stock's
  order: by decreasing stride, so an F-ordered input is summed in memory order.
Both also through the blocked, split path of large full reductions.
"""

import numpy as np
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import assert_no_fallback, assert_same_bits, compile_fn

x, X, T = pt.vector("x"), pt.matrix("X"), pt.tensor3("T")


def max_min_graphs():
    outs = [pt.max(x), pt.max(X), pt.max(X, axis=0), pt.max(X, axis=1), pt.min(X)]
    outs += [pt.max(T), pt.max(T, axis=(0, 2)), pt.min(T, axis=(1, 2))]
    # fused into elemwise loops (FusedElemwise reductions)
    outs += [pt.max(x * 2), pt.max(X * 2, axis=1), pt.min(T * 2, axis=(0, 2))]
    outs += [1 / pt.max(x)]  # the sign decides +-inf
    return outs


def values(rng, shape, wide=1):
    return rng.choice([-0.0, 0.0, -1.0, -2.0, 1.0], size=(*shape[:-1], wide * shape[-1]), p=[0.3, 0.3, 0.2, 0.15, 0.05])


def inputs_for(rng, n):
    """(layout, x, X, T): C arrays; F arrays; and arrays numba types 'A' (reversed,
    strided, axes moved). One compile per layout signature, so three."""
    x, X, T = values(rng, (n,)), values(rng, (n // 3, 3)), values(rng, (n // 12, 4, 3))
    return [
        ("C", x, X, T),
        ("F", x, np.asfortranarray(X), np.asfortranarray(T)),
        ("A", values(rng, (n,), 2)[::-2], values(rng, (n // 3, 3), 2)[::-1, ::2], np.moveaxis(T, 0, -1)[:, ::-1]),
    ]


@pytest.mark.parametrize(
    "backend, n", [("policy_strict", 97), ("policy_rewritten", 97), ("policy_rewritten", 120_000)]
)  # the large one is split / blocked
def test_max_min_signed_zeros_match_stock_in_every_layout(backend, n):
    outs = max_min_graphs()
    ref = compile_fn([x, X, T], outs, "stock_strict", cache_key="maxmin_zeros")
    fn = compile_fn([x, X, T], outs, backend, cache_key="maxmin_zeros")
    assert_no_fallback(fn)
    rng = np.random.default_rng(n)
    for trial in range(4):
        for name, xv, Xv, Tv in inputs_for(rng, n + 12 * trial):
            with np.errstate(divide="ignore"):
                expected, res = ref(xv, Xv, Tv), fn(xv, Xv, Tv)
            for out, a, b in zip(outs, res, expected, strict=True):
                try:
                    assert_same_bits(a, b)
                except AssertionError as err:
                    raise AssertionError(f"{out} on a {name} input {Xv.shape}: {err}") from None


def test_the_issue_case_agrees_with_stock_and_the_c_backend():
    v = np.array([-1.0, -0.0, 0.0, -3.0])
    outs = [pt.max(x), 1 / pt.max(x), 1 / pt.max(x * 1.0 - 0.0)]
    ref = compile_fn([x], outs, "stock_strict", cache_key="issue_max")(v)
    c = compile_fn([x], outs, "c", cache_key="issue_max")(v)
    assert np.signbit(ref[0]) and np.isneginf(ref[1])
    for backend in ("policy_strict", "policy_rewritten", "policy_fast"):
        with np.errstate(divide="ignore"):
            res = compile_fn([x], outs, backend, cache_key="issue_max")(v)
        for a, b, cc in zip(res, ref, c, strict=True):
            assert_same_bits(a, b)
            assert_same_bits(a, cc)


def test_lanes_of_a_dense_full_max():
    """stock's full max of a dense matrix runs 8 lanes: the first zero of lane 0 (position
    8, -0.0) beats the +0.0 at position 1; the same values as a vector: sequential."""
    M = -np.ones((2, 8))
    M[0, 1], M[1, 0] = 0.0, -0.0
    outs = [pt.max(X), pt.max(X.reshape((-1,)))]
    ref = compile_fn([X], outs, "stock_strict", cache_key="lanes")
    for v in (M, np.asfortranarray(M)):
        expected = ref(v)
        assert bool(np.signbit(expected[0])) != bool(np.signbit(expected[1]))
        for backend in ("policy_strict", "policy_rewritten"):
            for a, b in zip(compile_fn([X], outs, backend, cache_key="lanes")(v), expected, strict=True):
                assert_same_bits(a, b)


def test_split_and_unsplit_zero_signs_agree():
    fn = compile_fn([x, X, T], max_min_graphs(), "policy_rewritten", cache_key="maxmin_zeros")
    rng = np.random.default_rng(5)
    for _name, xv, Xv, Tv in inputs_for(rng, 150_000)[:3]:
        split = fn(xv, Xv, Tv)
        ptnumba_codegen.set_parallel_enabled(False)
        try:
            alone = fn(xv, Xv, Tv)
        finally:
            ptnumba_codegen.set_parallel_enabled(True)
        for a, b in zip(split, alone, strict=True):
            assert_same_bits(a, b)


def test_strict_sums_round_like_stock_in_its_stride_order():
    outs = [X.sum(), T.sum(), T.sum(axis=(0, 2)), T.prod(axis=(1, 2)), X.sum(axis=1), T.sum(axis=(0, 1))]
    ref = compile_fn([X, T], outs, "stock_strict", cache_key="strict_sums")
    fn = compile_fn([X, T], outs, "policy_strict", cache_key="strict_sums")
    assert_no_fallback(fn)
    rng = np.random.default_rng(11)
    Xb, Tb = rng.standard_normal((37, 29)), rng.uniform(0.5, 1.5, (5, 6, 7))
    cases = [
        (Xb, Tb),
        (np.asfortranarray(Xb), np.asfortranarray(Tb)),
        (Xb[::-1, ::2], np.moveaxis(Tb, 0, -1)[:, ::-1]),
    ]
    for Xv, Tv in cases:
        for out, a, b in zip(outs, fn(Xv, Tv), ref(Xv, Tv), strict=True):
            try:
                assert_same_bits(a, b)
            except AssertionError as err:
                raise AssertionError(f"{out} on {Xv.strides}, {Tv.strides}: {err}") from None
