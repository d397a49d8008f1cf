"""Every compact op (`compact.table.COMPACT`) steps aside where PyTensor is not the one it
replicates: a row whose stock source has another digest, or that names a function PyTensor
lacks, keeps the stock op (that row only), and `explain` and the INFO summary say which rows
are off and why. Importing the package never depends on those names.

The records themselves: each states, for every supported PyTensor, the digest of the stock
source it replicates there or why it does not replicate it, and the installed PyTensor is
where its record says."""

from __future__ import annotations

import dataclasses
import logging
import pickle

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

import ptnumba_codegen
from conftest import assert_same_bits, second_process_line
from ptnumba_codegen.compact.ops import compact_class, row_of
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, stock_name, why_off
from ptnumba_codegen.compact.table import COMPACT, rows_off
from ptnumba_codegen.passes.swap_compact import POSITION, SwapCompact

# rows off in this process before any test turns one off (on PyTensor 3.3.6: Dot, the solve, Cholesky)
BASELINE_OFF = set(rows_off())
MISSING = "pytensor.link.numba.dispatch.elemwise:_no_such_layout_rule"  # a private name no PyTensor has


@pytest.mark.parametrize("name", list(COMPACT))
def test_every_supported_pytensor_is_accounted_for(name):
    """Each supported version has the digest of the source the row replicates, or the reason
    it does not replicate it; never both."""
    source = COMPACT[name].source
    replicated = [v for versions in source.digests.values() for v in versions]
    assert len(replicated) == len(set(replicated))
    assert set(replicated).isdisjoint(source.elsewhere)
    assert sorted([*replicated, *source.elsewhere]) == sorted(SUPPORTED_PYTENSOR)


@pytest.mark.parametrize("name", list(COMPACT))
def test_the_installed_pytensor_is_where_its_record_says(name):
    replica = COMPACT[name]
    version = pytensor.__version__
    assert stock_name(replica.stock_op).__name__ == name
    if version in replica.source.elsewhere:
        assert why_off(replica) is not None and replica.source.elsewhere[version] in why_off(replica)
    elif version in SUPPORTED_PYTENSOR:
        assert why_off(replica) is None
        [digest] = [d for d, versions in replica.source.digests.items() if version in versions]
        assert replica.source.digest() == digest


@pytest.mark.parametrize("name", list(COMPACT))
def test_a_compact_class_prints_and_pickles_as_its_stock_class(name):
    cls = compact_class(name)
    stock = stock_name(COMPACT[name].stock_op)
    assert cls.__name__ == stock.__name__ and issubclass(cls, stock) and row_of(cls) is COMPACT[name]
    assert pickle.loads(pickle.dumps(cls)) is cls


def _graph():
    """A graph with nodes of many rows: DimShuffle, Dot, Subtensor, IncSubtensor, Join, Alloc,
    SpecifyShape, Reshape, CumOp."""
    x, y = pt.dmatrix("x"), pt.dmatrix("y")
    n = pt.lscalar("n")
    z = pt.specify_shape(x, (n, None)) @ y.T
    w = pt.inc_subtensor(z[1:], 1.5)
    joined = pt.concatenate([w, pt.zeros((2, w.shape[1]))], axis=0)
    out = pt.cumsum(joined.reshape((-1,)))[:7] + x[0].sum()
    return [x, y, n], out


def _args():
    rng = np.random.default_rng(11)
    return rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), np.int64(4)


def _swapped(fn) -> set:
    return {row_of(type(node.op)).name for node in fn.maker.fgraph.apply_nodes if row_of(type(node.op))}


# the backend of these tests: stock numba with fast math, its compact ops swapped in
SWAPPING = Mode(linker="numba", optimizer="fast_run").register((SwapCompact(), POSITION))


def _compile(mode):
    inputs, out = _graph()
    with pytensor.config.change_flags(numba__fastmath=True):
        return pytensor.function(inputs, out, mode=mode)


def test_a_row_naming_a_missing_private_name_is_off_and_only_it(monkeypatch):
    """DimShuffle's record names a function PyTensor lacks: DimShuffle keeps its stock op,
    every other row still swaps, and the values are stock's bits."""
    shuffle = COMPACT["DimShuffle"]
    broken = dataclasses.replace(shuffle, source=dataclasses.replace(shuffle.source, functions=(*shuffle.source.functions, MISSING)))
    monkeypatch.setitem(COMPACT, "DimShuffle", broken)
    off = rows_off()
    assert set(off) == BASELINE_OFF | {"DimShuffle"}
    assert "no pytensor.link.numba.dispatch.elemwise._no_such_layout_rule" in off["DimShuffle"]
    fn = _compile(SWAPPING)
    swapped = _swapped(fn)
    assert "DimShuffle" not in swapped and any(type(n.op).__name__ == "DimShuffle" for n in fn.maker.fgraph.apply_nodes)
    assert {"SpecifyShape", "Subtensor", "IncSubtensor", "Join", "Reshape", "CumOp"} <= swapped
    assert_same_bits(fn(*_args()), _compile(Mode(linker="numba", optimizer="fast_run"))(*_args()))


def test_explain_and_the_info_summary_say_which_rows_are_off(monkeypatch, caplog):
    cumop = COMPACT["CumOp"]
    monkeypatch.setitem(COMPACT, "CumOp", dataclasses.replace(cumop, source=dataclasses.replace(cumop.source, digests={})))
    inputs, out = _graph()
    with caplog.at_level(logging.INFO, logger="ptnumba_codegen"):
        fn = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("default"))
    assert "CumOp" not in _swapped(fn)
    summaries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("policy default:")]
    assert summaries and all("compact ops off (stock's kept): " in s and "CumOp (PyTensor " in s for s in summaries)
    report = ptnumba_codegen.explain(fn)
    [line] = [ln for ln in report.splitlines() if ln.startswith("compact ops off")]
    assert "CumOp (PyTensor " in line and "its source has digest" in line
    assert not any(name in line for name in set(COMPACT) - BASELINE_OFF - {"CumOp"})


def test_explain_says_nothing_of_rows_that_are_on():
    if BASELINE_OFF:
        pytest.skip(f"rows off on this PyTensor: {sorted(BASELINE_OFF)}")
    inputs, out = _graph()
    fn = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("default"))
    assert "compact ops off" not in ptnumba_codegen.explain(fn)


MISSING_AT_IMPORT = r"""
import pytensor.link.numba.dispatch.elemwise as elemwise
del elemwise._dimshuffle_out_layout  # a PyTensor without this private name
import pytensor, pytensor.tensor as pt
import ptnumba_codegen
from ptnumba_codegen.compact.ops import row_of
from ptnumba_codegen.compact.table import rows_off
from ptnumba_codegen.passes.swap_compact import SwapCompact
x, n = pt.dmatrix("x"), pt.lscalar("n")
fg = pytensor.graph.fg.FunctionGraph([x, n], [pt.specify_shape(x, (n, None)).T[1:]], clone=True)
SwapCompact().apply(fg)
swapped = sorted(row_of(type(node.op)).name for node in fg.apply_nodes if row_of(type(node.op)))
print("OFF", sorted(rows_off()), "|", rows_off().get("DimShuffle"), "|", swapped)
"""


def test_the_package_imports_without_a_private_name_and_only_its_row_is_off():
    line = second_process_line(MISSING_AT_IMPORT, [], "OFF")
    names, reason, swapped = line.removeprefix("OFF ").split(" | ")
    assert names == str(sorted(BASELINE_OFF | {"DimShuffle"}))
    assert "no pytensor.link.numba.dispatch.elemwise._dimshuffle_out_layout" in reason
    assert swapped == str(["SpecifyShape", "Subtensor"])  # the transpose keeps the stock DimShuffle


SOURCES_DIFFER = r"""
import linecache, pathlib
import pytensor
# every stock function's source a line further down: every row's digest differs
root = pathlib.Path(pytensor.__file__).parent / "link" / "numba" / "dispatch"
for path in root.rglob("*.py"):
    linecache.cache[str(path)] = (0, None, ["# another PyTensor\n", *path.read_text().splitlines(True)], str(path))
import pytensor.tensor.blas._core as blas_core
linecache.cache[blas_core.__file__] = (0, None, ["#\n", *linecache.getlines(blas_core.__file__)], blas_core.__file__)
import ptnumba_codegen
from ptnumba_codegen.compact.table import COMPACT, rows_off
print("OFF", len(rows_off()), len(COMPACT), all("its source has digest" in why or " no " in why for why in rows_off().values()))
"""


def test_the_package_imports_where_every_stock_source_differs():
    assert second_process_line(SOURCES_DIFFER, [], "OFF") == f"OFF {len(COMPACT)} {len(COMPACT)} True"


def test_the_stock_loop_in_ir_steps_aside_where_its_source_differs(monkeypatch):
    """`backend.stock_loop_ir` states what it replicates (`STOCK_LOOP`) the same way: another
    source, and numba compiles the stock overload (`kernel.compiled_or_stock`)."""
    from ptnumba_codegen.backend import stock_loop_ir
    from ptnumba_codegen.lowering.base import Unsupported

    loop = stock_loop_ir.STOCK_LOOP
    assert sorted(v for versions in loop.digests.values() for v in versions) == sorted(SUPPORTED_PYTENSOR)
    assert (stock_loop_ir._stock_loop_problem() is None) == (pytensor.__version__ in SUPPORTED_PYTENSOR)
    monkeypatch.setattr(stock_loop_ir, "STOCK_LOOP", dataclasses.replace(loop, digests={}))
    stock_loop_ir._stock_loop_problem.cache_clear()
    try:
        with pytest.raises(Unsupported, match="its source has digest"):
            stock_loop_ir.implementation_in_ir(None, None, None, False)(None, ())
    finally:
        stock_loop_ir._stock_loop_problem.cache_clear()
