"""The overflow-guard probes' verdicts on disk (as_written/guard_verdicts.py: without them a
warm process probes every as-written cone with PyTensor's canonicalize and stabilize again,
CPU time at every compile that stock never spends).

A cone's key spells everything the probe's answer depends on: two cones built apart from
the same ops are one key, a change of op, property, constant, dtype, shape or wiring is
another, and a cone holding something it cannot spell has no key (probed every time). A
"no change" verdict is read back instead of probing; a cone the rewrites do change is probed
every time and still guarded; a damaged file or one stored under another key is a miss; with
PyTensor's numba cache off nothing is read or written."""

from __future__ import annotations

import pickle

import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest

from ptnumba_codegen.as_written import guard_verdicts, guards


def _cone(build):
    x = pt.vector("x")
    y = pt.vector("y")
    return [x, y], build(x, y)


def _text(build):
    inputs, out = _cone(build)
    return guard_verdicts.cone_text(inputs, out)


PLAIN = lambda x, y: pt.exp(x * y + 1.0)[1:] > 0.5  # noqa: E731  (nothing for stabilize)
NAIVE = lambda x, y: pt.log(1.0 + pt.exp(x)) + y  # noqa: E731  (stabilize makes it softplus)


def test_the_same_cone_built_twice_is_one_key():
    assert _text(PLAIN) is not None
    assert _text(PLAIN) == _text(PLAIN)


@pytest.mark.parametrize(
    "other",
    [
        lambda x, y: pt.exp(x * y + 2.0)[1:] > 0.5,  # a constant's value
        lambda x, y: pt.exp(x * y + np.float64(1.0))[1:] > 0.5,  # a constant's dtype (1.0 alone is float32)
        lambda x, y: pt.exp(x * y + 1.0)[2:] > 0.5,  # an op's property (the slice)
        lambda x, y: pt.exp(x * y + 1.0)[1:] >= 0.5,  # an op
        lambda x, y: pt.exp(x * (y + 1.0))[1:] > 0.5,  # the wiring (inputs are named by first use: y * x is x * y)
        lambda x, y: pt.exp(x * x + 1.0)[1:] > 0.5,  # an input read twice
        lambda x, y: pt.exp(pt.cast(x, "float32") * y + 1.0)[1:] > 0.5,  # a dtype
        lambda x, y: pt.exp(pt.specify_shape(x, (3,)) * y + 1.0)[1:] > 0.5,  # a static shape
    ],
)
def test_any_difference_is_another_key(other):
    assert _text(other) is not None
    assert _text(other) != _text(PLAIN)


def test_an_op_it_cannot_spell_has_no_key():
    # an op without __props__ whose state holds a lambda: its code is not in its name
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class Opaque(Op):
        def __init__(self):
            self.hook = lambda v: v

        def make_node(self, x):
            return Apply(self, [x], [x.type()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = inputs[0]

    assert _text(lambda x, y: Opaque()(x) + y > 0) is None


def _composite(expr):
    a, b = ps.float64("a"), ps.float64("b")
    return pt.elemwise.Elemwise(ps.Composite([a, b], [expr(a, b)]))


def test_an_inner_graph_is_spelled_as_a_graph():
    """A Composite's inner graph (as a Scan's or an OpFromGraph's) is part of the key: the
    same inner graph built twice is one key, another inner graph another."""
    same = [_text(lambda x, y: _composite(lambda a, b: ps.exp(a) + b)(x, y) > 0) for _ in range(2)]
    other = _text(lambda x, y: _composite(lambda a, b: ps.exp(b) + a)(x, y) > 0)
    assert same[0] is not None and same[0] == same[1]
    assert other is not None and other != same[0]


@pytest.fixture
def probes(tmp_path, monkeypatch):
    """PyTensor's numba cache on in ``tmp_path``; every real probe counted (each still runs)."""
    monkeypatch.setattr(numba_cache, "NUMBA_CACHE_PATH", tmp_path)
    runs = []
    real = guards._stabilized

    def counting(inputs, var):
        runs.append(var)
        return real(inputs, var)

    monkeypatch.setattr(guards, "_stabilized", counting)
    with pytensor.config.change_flags(numba__cache=True):
        yield runs


def _files(tmp_path):
    directory = tmp_path / guard_verdicts.CACHE.subdir
    return sorted(directory.glob("*.pkl")) if directory.exists() else []


def test_no_change_is_read_back_without_probing(probes, tmp_path):
    assert guards.stabilized(*_cone(PLAIN)) is None
    assert len(probes) == 1 and len(_files(tmp_path)) == 1
    assert guards.stabilized(*_cone(PLAIN)) is None  # a new graph, the same cone: read back
    assert len(probes) == 1


def test_a_change_is_probed_every_time_and_guarded(probes, tmp_path):
    for round_ in (1, 2):
        inputs, out = _cone(NAIVE)
        stable = guards.stabilized(inputs, out)
        assert stable is not None and len(probes) == round_
        ops = {type(getattr(n.op, "scalar_op", n.op)).__name__ for n in pytensor.graph.traversal.applys_between(inputs, [stable])}
        assert "Softplus" in ops
        f = pytensor.function(inputs, stable, mode="FAST_COMPILE")
        assert np.isfinite(f(np.array([800.0]), np.array([0.0]))).all()  # the naive form overflows there
    assert _files(tmp_path) == []


def test_a_damaged_or_foreign_file_is_a_miss(probes, tmp_path):
    guards.stabilized(*_cone(PLAIN))
    [path] = _files(tmp_path)
    path.write_bytes(b"not a pickle")
    assert guards.stabilized(*_cone(PLAIN)) is None and len(probes) == 2
    record = pickle.loads(path.read_bytes())  # rewritten whole
    record["key"] = {"text": record["key"]["text"] + "\nsomething else"}  # a digest collision
    path.write_bytes(pickle.dumps(record))
    assert guards.stabilized(*_cone(PLAIN)) is None and len(probes) == 3


def test_the_key_names_the_rewrites_the_probe_runs():
    text = guard_verdicts.rewrites_text(guards._rewriters())
    assert f"pytensor {pytensor.__version__}" in text
    assert "stabilize" in text and "local_log1p" in text


def test_nothing_on_disk_while_the_numba_cache_is_off(probes, tmp_path):
    with pytensor.config.change_flags(numba__cache=False):
        guards.stabilized(*_cone(PLAIN))
        guards.stabilized(*_cone(PLAIN))
    assert len(probes) == 2 and _files(tmp_path) == []
