"""Random scalar graphs for the differential fuzzer (tests/test_fuzz.py).

A *batch* is a pool of inputs (dtype, static broadcast pattern) and a list of graphs over
them; a batch compiles into one PyTensor function per backend (compiles are the cost), so
one hypothesis example checks many graphs. Hypothesis draws the structure (and shrinks
it); a drawn seed makes the values and memory layouts.

Graphs use every op the generator lowers natively, by a numba ufunc loop or by calling
the stock function; the dtypes bool, uint8, int32, int64, float32, float64; 0 to 3 dims
with broadcasting; reductions over random axes; gradients. Values mix special ones
(+-0, +-inf, NaN, subnormals, overflow edges, integer extremes); inputs come C-ordered,
F-ordered, strided, reversed or transposed.

A few guards keep graphs away from undefined behaviour that is not ours to test (each
says why): float -> int casts of NaN or out-of-range values, integer powers with negative
exponents, the signed remainder of the minimum by -1 (x86 traps, stock too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import strategies as st
from pytensor.graph.traversal import graph_inputs

DTYPES = ("bool", "uint8", "int32", "int64", "float32", "float64")
FLOATS = ("float32", "float64")
MAX_NDIM = 3


def _is_int(x) -> bool:
    return x.dtype[0] in "iu"


def _signed(x) -> bool:
    return x.dtype[0] == "i"


def _float_in(x):
    return x if x.dtype in FLOATS else pt.cast(x, "float64" if x.dtype in ("int32", "int64") else "float32")


def _safe_cast(x, dtype):
    """float -> int casts of NaN/inf/out-of-range values are undefined (LLVM poison, C UB):
    clip into range first. Other casts wrap or compare with 0, which is defined."""
    if x.dtype in FLOATS and dtype[0] in "iu":
        lo, hi = {"uint8": (0, 255), "int32": (-(2**31) + 1, 2**31 - 1), "int64": (-(2**62), 2**62)}[dtype]
        x = pt.clip(pt.switch(pt.isnan(x), 0, x), lo, hi)
    return pt.cast(x, dtype)


def _divisor(d):
    """numba's signed remainder of the minimum by -1 traps on x86 (stock too)."""
    return pt.switch(pt.eq(d, -1), pt.constant(3, dtype=d.dtype), d) if _signed(d) else d


def _exponent(y):
    """An integer power with a negative exponent raises (stock too): exponents in 0..3."""
    return pt.mod(y, pt.constant(4, dtype=y.dtype)) if _is_int(y) else y


def _no_bool(x):
    # PyTensor's Python softplus of a bool computes np.exp(True) in float16 (the py linker
    # and the C backend both run it), so the references would be wrong: feed an int8
    return pt.cast(x, "int8") if x.dtype == "bool" else x


UNARY = {
    "exp": pt.exp, "exp2": pt.exp2, "expm1": pt.expm1, "log": pt.log, "log2": pt.log2,
    "log10": pt.log10, "log1p": pt.log1p, "sqrt": pt.sqrt, "sqr": pt.sqr, "abs": pt.abs,
    "neg": lambda x: x if x.dtype in ("bool", "uint8") else -x,
    "sign": pt.sign, "floor": pt.floor, "ceil": pt.ceil, "trunc": pt.trunc,
    "round_even": lambda x: pt.round(x, mode="half_to_even"),
    "round_away": lambda x: pt.round(x, mode="half_away_from_zero"),
    "sin": pt.sin, "cos": pt.cos, "tan": pt.tan, "arcsin": pt.arcsin, "arccos": pt.arccos,
    "arctan": pt.arctan, "sinh": pt.sinh, "cosh": pt.cosh, "tanh": pt.tanh,
    "arcsinh": pt.arcsinh, "arccosh": pt.arccosh, "arctanh": pt.arctanh,
    "sigmoid": pt.sigmoid, "softplus": lambda x: pt.softplus(_no_bool(x)),
    "log1mexp": pt.log1mexp, "erf": pt.erf, "erfc": pt.erfc, "gammaln": pt.gammaln,
    "reciprocal": pt.reciprocal, "isnan": pt.isnan, "isinf": pt.isinf,
    "invert": lambda x: pt.invert(x) if x.dtype[0] in "biu" else x,
    "psi": lambda x: pt.psi(_float_in(x)),  # a stock call inside our loop
    "erfcx": lambda x: pt.erfcx(_float_in(x)),  # likewise
    **{f"cast_{d}": (lambda d: lambda x: _safe_cast(x, d))(d) for d in DTYPES},
}  # fmt: skip

BINARY = {
    "add": pt.add, "sub": lambda x, y: pt.sub(x, y) if "bool" not in (x.dtype, y.dtype) else pt.add(x, y),
    "mul": pt.mul, "true_div": pt.true_div,
    "int_div": lambda x, y: pt.int_div(x, _divisor(y)), "mod": lambda x, y: pt.mod(x, _divisor(y)),
    "pow": lambda x, y: pt.pow(x, _exponent(y)),
    "maximum": pt.maximum, "minimum": pt.minimum,
    "eq": pt.eq, "neq": pt.neq, "lt": pt.lt, "le": pt.le, "gt": pt.gt, "ge": pt.ge,
    "and": pt.and_, "or": pt.or_, "xor": pt.xor, "arctan2": pt.arctan2,
}  # fmt: skip

TERNARY = {
    "switch": pt.switch,
    "clip": pt.clip,
}

REDUCTIONS = ("sum", "prod", "max", "min", "all", "any")
# what follows a reduction: nothing, its reciprocal (the sign of a zero), or a decision on
# it against a constant (a predicate on a sum is not one on its terms: graph_ranges)
AFTER_REDUCTION = (False, True, "le1", "ge0", "eq0")
LAYOUTS = ("C", "C", "F", "strided", "reversed", "transposed")


# -- the drawn structure ------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    shape: tuple[int, ...]  # the iteration shape every input broadcasts to
    inputs: tuple[tuple[str, tuple[bool, ...]], ...]  # (dtype, broadcastable) per input
    graphs: tuple  # expression trees: ("in", k) | ("const", value) | (op, child, ...)
    reductions: tuple  # per graph: None or (name, axes or None, what follows: AFTER_REDUCTION)
    grads: tuple[bool, ...]  # per graph: also its gradient
    seed: int
    # tie graphs (``("tie", k)`` in ``graphs``), drawn with ``batches(ties=True)``: per tie,
    # (expression tree of test_ties_as_written, decision, swap, index of its first input);
    # its leaves and then its threshold are float64 inputs of the batch (full shape)
    ties: tuple = ()


def _tree(n_inputs: int):
    leaf = st.one_of(
        st.tuples(st.just("in"), st.integers(0, n_inputs - 1)),
        st.tuples(st.just("const"), st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e-300, 1e300, np.inf, 7])),
    )

    def extend(children):
        return st.one_of(
            st.tuples(st.sampled_from(sorted(UNARY)), children),
            st.tuples(st.sampled_from(sorted(BINARY)), children, children),
            st.tuples(st.sampled_from(sorted(TERNARY)), children, children, children),
        )

    return st.recursive(leaf, extend, max_leaves=6)


@st.composite
def batches(draw, n_graphs: int, min_ndim: int = 0, max_ndim: int = MAX_NDIM, ties: bool = False):
    """A batch; with ``ties``, about half its graphs are tie graphs (see `tie_graphs`)."""
    ndim = draw(st.integers(min_ndim, max_ndim))
    big = draw(st.integers(0, 9)) == 0 and ndim >= 1  # sometimes large: split / blocked loops
    sizes = [draw(st.integers(1, 5)) for _ in range(ndim)]
    if big:
        sizes[0] = 70_000 // max(1, int(np.prod(sizes[1:])))
    n_inputs = draw(st.integers(2, 6))
    inputs = []
    for _ in range(n_inputs):
        dtype = draw(st.sampled_from(DTYPES))
        in_ndim = draw(st.integers(0, ndim))
        bc = tuple(draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else False for _ in range(in_ndim))
        inputs.append((dtype, bc))
    graphs = tuple(draw(_tree(n_inputs)) for _ in range(n_graphs))
    reductions = []
    for _ in range(n_graphs):
        if ndim == 0 or draw(st.integers(0, 2)) > 0:
            reductions.append(None)
            continue
        axes = draw(st.one_of(st.none(), st.sets(st.integers(0, ndim - 1), min_size=1).map(lambda s: tuple(sorted(s)))))
        reductions.append((draw(st.sampled_from(REDUCTIONS)), axes, draw(st.sampled_from(AFTER_REDUCTION))))
    grads = tuple(draw(st.integers(0, 3)) == 0 for _ in range(n_graphs))
    tie_specs = ()
    if ties:
        graphs, reductions, grads, inputs, tie_specs = draw(tie_graphs(graphs, reductions, grads, inputs, ndim))
    return Batch(tuple(sizes), tuple(inputs), graphs, tuple(reductions), grads, draw(st.integers(0, 2**32 - 1)), tie_specs)


@st.composite
def tie_graphs(draw, graphs, reductions, grads, inputs, ndim):
    """Replace about half the graphs by tie graphs: an expression of its own float64 leaves
    built in written order (``x*(y*z)``, ``exp(a)*exp(c)``, n-ary products and sums,
    divisions: the trees of tests/test_ties_as_written.py, which PyTensor's rewrites
    reassociate or fuse) decided against a threshold input that `values` computes the
    written way (Python floats, libm), at the tie on two thirds of the elements and an ulp
    off it on the rest. Float decisions (minimum, maximum, clip, switch) get gradients."""
    from test_ties_as_written import graph_spec, n_leaves

    graphs, reductions, grads, inputs = list(graphs), list(reductions), list(grads), list(inputs)
    specs = []
    for g in range(len(graphs)):
        if not draw(st.booleans()):
            continue
        spec = draw(graph_spec)  # (its row-sum decisions need 1-d rows of 8: not drawn)
        n = max(2, n_leaves(spec["tree"]))
        specs.append((spec["tree"], draw(st.sampled_from(TIE_DECISIONS)), spec["swap"], len(inputs)))
        inputs.extend([("float64", (False,) * ndim)] * (n + 1))  # leaves, threshold
        graphs[g], reductions[g], grads[g] = ("tie", len(specs) - 1), None, True
    return tuple(graphs), tuple(reductions), tuple(grads), tuple(inputs), tuple(specs)


# -- building ------------------------------------------------------------------------------


def input_variables(batch: Batch):
    ndim = len(batch.shape)
    out = []
    for k, (dtype, bc) in enumerate(batch.inputs):
        shape = tuple(1 if b else None for b in bc)
        out.append(pt.tensor(f"in{k}_{dtype}", dtype=dtype, shape=shape) if bc or ndim else pt.tensor(f"in{k}_{dtype}", dtype=dtype, shape=()))
    return out


TIE_DECISIONS = ("minimum", "maximum", "clip", "le", "lt", "ge", "gt", "eq", "neq", "switch")
# more deciding nodes of docs/policies.md#decisions-as-written, on the expression ``p`` and
# its threshold ``b`` (at the tie p / b is 1 or an ulp off it, p - b is 0 or not)
MORE_TIE_DECISIONS = {
    "sign": lambda p, b: pt.sign(p - b),
    "floor": lambda p, b: pt.floor(p / b),
    "int_div": lambda p, b: p // b,
    "cast_int": lambda p, b: pt.cast(p / b, "int64"),
    "argmax": lambda p, b: pt.argmax(pt.stack([p, b]), axis=0),
    "max": lambda p, b: pt.max(pt.stack([p, b]), axis=0),
}
TIE_DECISIONS += tuple(MORE_TIE_DECISIONS)


def _build_tie(spec, xs):
    import test_ties_as_written as tw

    tree, decision, swap, first = spec
    n = max(2, tw.n_leaves(tree))
    leaves, b = xs[first : first + n], xs[first + n]
    p = tw.build(tree, iter(leaves))
    if decision in MORE_TIE_DECISIONS:
        return MORE_TIE_DECISIONS[decision](*((b, p) if swap else (p, b)))
    return tw.decide({"decision": decision, "swap": swap}, p, b, leaves)


def _build(tree, xs, ties=()):
    kind = tree[0]
    if kind == "in":
        return xs[tree[1]]
    if kind == "tie":
        return _build_tie(ties[tree[1]], xs)
    if kind == "const":
        value = tree[1]
        return pt.constant(np.int8(value) if isinstance(value, int) else np.float64(value))
    children = [_build(c, xs) for c in tree[1:]]
    fn = {**UNARY, **BINARY, **TERNARY}[kind]
    try:
        return fn(*children)
    except (TypeError, ValueError, NotImplementedError):
        return children[0]  # not defined for these dtypes (bit ops on floats, ...)


def _reduce(x, spec):
    name, axes, then = spec
    if x.ndim == 0:
        return x
    axes = None if axes is None else tuple(a for a in axes if a < x.ndim) or None
    out = getattr(pt, name)(x, axis=axes)
    if then is True and out.dtype in FLOATS:
        return pt.reciprocal(out)
    if then in ("le1", "ge0", "eq0") and out.dtype != "bool":
        return {"le1": pt.le(out, 1), "ge0": pt.ge(out, 0), "eq0": pt.eq(out, 0)}[then]
    return out


def build(batch: Batch):
    """(inputs, outputs, labels): every graph, its reduction, its gradients."""
    xs = input_variables(batch)
    outs, labels = [], []
    for g, (tree, red, grad) in enumerate(zip(batch.graphs, batch.reductions, batch.grads, strict=True)):
        out = _build(tree, xs, batch.ties)
        if out.owner is None:
            continue  # an input or a constant: no kernel
        if red is not None:
            out = _reduce(out, red)
        outs.append(out)
        labels.append(f"graph {g}")
        if grad and out.dtype in FLOATS:
            wrt = [x for x in xs if x.dtype in FLOATS and x in graph_inputs([out])]
            if wrt:
                try:
                    grads = pytensor.grad(out.sum(), wrt, disconnected_inputs="ignore")
                except Exception:  # noqa: BLE001  (non-differentiable ops: no gradient)
                    grads = []
                for x, gx in zip(wrt, grads, strict=False):
                    outs.append(gx)
                    labels.append(f"graph {g}: d/d{x.name}")
    return xs, outs, labels


# -- values --------------------------------------------------------------------------------

SPECIAL = {
    "float64": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1e-310, 2.2250738585072014e-308, 1.7976931348623157e308,
                -1e308, 709.7, 710.0, -745.0, 1.0, -1.0, 0.5, 1e-8, 3.0, -2.5],
    "float32": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 1.1754944e-38, 3.4028235e38, -3e38, 88.7, 89.0,
                -104.0, 1.0, -1.0, 0.5, 1e-4, 3.0, -2.5],
    "int64": [0, 1, -1, 2, -(2**63), 2**63 - 1, 3, -7, 2**31, 100],
    "int32": [0, 1, -1, 2, -(2**31), 2**31 - 1, 3, -7, 16777217, 100],
    "uint8": [0, 1, 2, 255, 254, 3, 7, 128],
}  # fmt: skip


def _values(rng, dtype, shape, special_share):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in FLOATS:
        v = rng.standard_normal(shape) * rng.choice([1.0, 3.0, 30.0])
    else:
        info = np.iinfo(dtype)
        v = rng.integers(max(info.min, -20), min(info.max, 20), shape, endpoint=True)
    v = np.asarray(v)
    mask = rng.random(shape) < special_share
    specials = np.array(SPECIAL[dtype], dtype=object)
    v = v.astype(object)
    v[mask] = rng.choice(specials, size=int(mask.sum())) if mask.any() else v[mask]
    return np.asarray(v.tolist() if v.ndim else v.item(), dtype=dtype)


def _layout(rng, arr, layout):
    if arr.ndim == 0:
        return arr
    if layout == "F":
        return np.asfortranarray(arr)
    if layout == "strided":
        wide = np.repeat(arr, 2, axis=-1)
        return wide[..., ::2]
    if layout == "reversed":
        axis = int(rng.integers(arr.ndim))
        return np.flip(np.flip(arr, axis).copy(), axis)
    if layout == "transposed" and arr.ndim >= 2:
        return np.ascontiguousarray(arr.T).T
    return arr


def values(batch: Batch, call: int):
    """The inputs' values for one call (``call`` 0: few special values, 1: many), each in
    the memory layout the batch's seed picks (the same for every call: one compile)."""
    layouts = np.random.default_rng(batch.seed).choice(len(LAYOUTS), size=len(batch.inputs))
    rng = np.random.default_rng((batch.seed, call))
    ndim = len(batch.shape)
    out = []
    for (dtype, bc), lay in zip(batch.inputs, layouts, strict=True):
        shape = tuple(1 if b else n for b, n in zip(bc, batch.shape[ndim - len(bc) :], strict=True))
        with np.errstate(all="ignore"):
            arr = _values(rng, dtype, shape, 0.15 if call == 0 else 0.6)
        out.append(_layout(rng, arr, LAYOUTS[lay]))
    for spec in batch.ties:
        _tie_values(spec, out, batch, np.random.default_rng((batch.seed, call, spec[3])))
    return out


def _tie_values(spec, vals, batch, rng):
    """The leaves of a tie graph (0.5 to 2, negative on some leaves) and its threshold: the
    expression evaluated in written order with Python floats and libm (``math``), then
    nudged by an ulp up on a third of the elements and down on a sixth (in place)."""
    import test_ties_as_written as tw

    tree, decision, swap, first = spec
    n = max(2, tw.n_leaves(tree))
    shape = batch.shape
    leaves = [rng.uniform(0.5, 2.0, shape) * (rng.choice([-1.0, 1.0], shape) if rng.random() < 0.3 else 1.0) for _ in range(n)]
    with np.errstate(all="ignore"):
        written = np.frompyfunc(lambda *v: tw.evaluate(tree, iter(map(float, v))), n, 1)
        b = np.asarray(written(*leaves), dtype="float64").reshape(shape)
    flat = b.reshape(-1)
    flat[1::3] = np.nextafter(flat[1::3], np.inf)
    flat[2::6] = np.nextafter(flat[2::6], -np.inf)
    for k, v in enumerate([*leaves, b]):
        vals[first + k] = np.asarray(v, dtype="float64")


def perturbed(vals, rng, ulps: int = 2):
    """Float inputs moved by 1 to ``ulps`` ulp each, up or down (the conditioning probe).
    Never by 0: a 0-d input left in place measured nothing (a float32 expm1 upcast to a
    float64 output then got a float64 tolerance; found by the long profile)."""
    out = []
    for v in vals:
        if v.dtype.kind != "f":
            out.append(v)
            continue
        p = np.array(v, copy=True)
        steps = rng.integers(1, ulps, p.shape, endpoint=True) * rng.choice(np.array([-1, 1]), p.shape)
        for _ in range(ulps):
            up, down = steps > 0, steps < 0
            p = np.where(up, np.nextafter(p, np.inf), np.where(down, np.nextafter(p, -np.inf), p)).astype(v.dtype)
            steps = steps - np.sign(steps)
        out.append(p)
    return out
