"""`compact.node_intrinsics.node_intrinsic`: a node function lowered into its caller, and
the per-node fallback to the stock node function when the generator fails, decided while
the caller is typed (never an exception at its first call)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from numba import njit, types

from ptnumba_codegen.compact import node_intrinsics as ni


def _stock():
    @njit
    def stock(x):
        return x * 2.0

    return stock


def _typer(fail_in: str | None):
    def typer(typingctx, arg_types):
        if fail_in == "typer":
            raise RuntimeError("typer broke")
        (ty,) = arg_types

        def emit(context, builder, args):
            if fail_in == "emit":
                raise RuntimeError("emit broke")
            return builder.fmul(args[0], context.get_constant(types.float64, 3.0))  # not stock's: tells them apart

        return types.float64(ty), emit

    return typer


@pytest.mark.parametrize("fail_in", [None, "emit", "typer"])
def test_a_failing_generator_falls_back_to_stock(fail_in, caplog):
    fn = ni.node_intrinsic(f"twice_{fail_in}", 1, _typer(fail_in), _stock)

    @njit
    def caller(x):
        return fn(x) + 1.0

    with caplog.at_level(logging.INFO, logger="ptnumba_codegen"):
        got = caller(1.5)
    assert got == (1.5 * 3.0 + 1.0 if fail_in is None else 1.5 * 2.0 + 1.0)
    fell_back = [r.getMessage() for r in caplog.records if "falls back to the stock node function" in r.getMessage()]
    assert bool(fell_back) == (fail_in is not None)
    if fail_in:
        assert f"{fail_in} broke" in fell_back[0]


def test_types_that_are_not_the_nodes_go_to_stock():
    """The typer's None (types it does not take): stock's function, typed by numba."""
    fn = ni.node_intrinsic("only_arrays", 1, lambda typingctx, arg_types: None, _stock)

    @njit
    def caller(x):
        return fn(x)

    assert caller(np.float64(2.5)) == 5.0


def test_an_overloaded_stock_function_is_called_through_a_jitted_wrapper():
    from numba.extending import overload

    def plain(x):
        return x

    @overload(plain)
    def _plain(x):
        return lambda x: x + 0.5

    fn = ni.node_intrinsic("overloaded_stock", 1, lambda typingctx, arg_types: None, lambda: plain)

    @njit
    def caller(x):
        return fn(x)

    assert caller(1.0) == 1.5
