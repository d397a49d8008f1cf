"""Scan loops over native scalars: a Scan whose inner graph is 0-d kernels only.

PyTensor's numba Scan (``pytensor/link/numba/dispatch/scan.py``) calls its inner function
once per step with 0-d arrays: every step writes each tap into a 0-d array, passes them all
(by reference, NRT-counted), allocates a 0-d array per output of every inner kernel and
per inner output, and copies the outputs back. For a recursion of a few flops per step
(an Euler ODE step, a GARCH variance update, their gradients) that bookkeeping is the
whole cost (a step's math is a few flops, its bookkeeping far more).

When every inner input, output and node of a Scan is 0-d and every node is a kernel the
generator plans (an Elemwise/Composite/ScalarOp body, no reduction) or an identity
(DeepCopyOp, ScalarFromTensor, TensorFromScalar), the policy pass gives the Scan a
policy-carrying op (`scan_problem` says why not otherwise), and `funcify_scalar_scan`
compiles it as one loop over native scalars: taps are read from the outer buffers as
scalars, the inner kernels are the generator's scalar bodies (`build_scalar_kernel`, the
same planned bodies and per-instruction flags as the node's own kernel) called from one
step function that LLVM inlines into the loop, and the results are stored straight into
the outer buffers. Buffer handling (taps, circular storage, rotation, copies of buffers the
Scan may not destroy) follows the stock loop. A node whose body fails to compile runs the
stock kernel for that node, on 0-d arrays made for it. While loops are left to stock.
"""

from __future__ import annotations

from textwrap import dedent, indent

import numpy as np
from pytensor.compile.ops import DeepCopyOp
from pytensor.graph.basic import Constant
from pytensor.scalar.basic import ScalarType
from pytensor.scan.op import Scan
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
from pytensor.tensor.type import TensorType

from ptnumba_codegen.backend.fallbacks import compile_fallback, perform_impl
from ptnumba_codegen.backend.ops import is_policy_op
from ptnumba_codegen.backend.plans import kernel_key, plan_node
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.lowering.kernel import KERNEL_JIT_OPTIONS, build_scalar_kernel, define
from ptnumba_codegen.lowering.node_keys import cache_key

SCAN_VERSION = 1
IDENTITY_OPS = (DeepCopyOp, ScalarFromTensor, TensorFromScalar)


def _scalar_var(var) -> bool:
    t = var.type
    if isinstance(t, TensorType):
        ok = t.ndim == 0
    elif isinstance(t, ScalarType):
        ok = True
    else:
        return False
    return ok and np.dtype(t.dtype).kind in "biuf" and t.dtype != "float16"


def scan_problem(node) -> str | None:
    """Why ``node`` (a Scan) is not compiled as a scalar loop; None when it is."""
    op = node.op
    if not isinstance(op, Scan):
        return "not a Scan"
    if op.info.as_while:
        return "a while loop"
    fg = op.fgraph
    for var in (*fg.inputs, *fg.outputs):
        if not _scalar_var(var):
            return f"inner variable {var} of type {var.type} is not a 0-d number"
    for nd in fg.toposort():
        if any(not _scalar_var(v) for v in (*nd.inputs, *nd.outputs)):
            return f"inner node {nd.op} is not 0-d"
        if isinstance(nd.op, IDENTITY_OPS):
            continue
        if not is_policy_op(nd.op):
            return f"inner node {nd.op} is not a policy kernel"
        try:
            plan = plan_node(nd)
        except Unsupported as err:
            return f"inner node {nd.op}: {err}"
        check = INNER_PLANS.get(plan.kind)
        why = f"is a {plan.kind} kernel" if check is None else check(plan)
        if why is not None:
            return f"inner node {nd.op} {why}"
    return None


def _zero_d_loop(plan) -> str | None:
    if plan.spec.ndim != 0 or plan.spec.reduces or any(f.kind != "as_is" for f in plan.finish):
        return "is not a 0-d elementwise kernel"
    return None


# plan kind of an inner node -> why it cannot run in the scalar loop (None: it can);
# kinds not listed cannot
INNER_PLANS = {
    "loop": _zero_d_loop,  # a loop over 0-d arrays, nothing reduced: its body on numbers
    "scalar": lambda plan: None,  # already a function of numbers
}


def _np_dtype(dtype: str) -> str:
    return "np.bool_" if dtype == "bool" else f"np.{dtype}"


def _node_kernel(nd, **kwargs):
    """(scalar function of ``nd``, its cache key or None)."""
    plan = plan_node(nd)
    stock_fallback = compile_fallback(nd.op, nd, **kwargs)
    if all(isinstance(v.type, ScalarType) for v in nd.inputs):
        fallback = stock_fallback  # the stock kernel of a scalar op takes scalars
    else:
        # the stock kernel of a 0-d Elemwise takes and returns 0-d arrays
        def fallback(reason, nd=nd):
            stock = stock_fallback(reason)
            n_in, n_out = len(nd.inputs), len(nd.outputs)
            params = ", ".join(f"x{k}" for k in range(n_in))
            lines = [f"def wrapped({params}):"]
            for k, v in enumerate(nd.inputs):
                lines.append(f"    a{k} = np.empty((), dtype={_np_dtype(v.type.dtype)})")
                lines.append(f"    a{k}[()] = x{k}")
            args = ", ".join(f"a{k}" for k in range(n_in))
            if n_out == 1:
                lines.append(f"    return stock({args})[()]")
            else:
                lines.append(f"    r = stock({args})")
                lines.append("    return (" + "".join(f"r[{k}][()], " for k in range(n_out)) + ")")
            from numba import njit

            return njit(define("\n".join(lines) + "\n", stock=stock, np=np))

    name = f"policy_scan_{type(nd.op).stock_class.__name__.lower()}"
    fn = build_scalar_kernel(plan.body, _scalar_python_impl(nd, perform_impl(nd)), name=name, fallback=fallback)
    return fn, kernel_key(nd.op, nd, plan)


def _scalar_python_impl(nd, perform):
    """The node's ``perform`` on scalars (the kernel run without JIT): a 0-d Elemwise
    computes on fresh 0-d arrays (it may write into an input) and its outputs are unwrapped."""
    if all(isinstance(v.type, ScalarType) for v in nd.inputs):
        return perform
    dtypes = [v.type.dtype for v in nd.inputs]

    def run(*xs):
        out = perform(*(np.array(x, dtype=d) for x, d in zip(xs, dtypes, strict=True)))
        return tuple(o[()] for o in out) if isinstance(out, tuple) else np.asarray(out)[()]

    return run


def _step_source(fg, **kwargs):
    """Source of ``step(x0, ...)`` computing the inner outputs from the inner inputs, its
    globals, and the cache keys of its kernels."""
    names: dict = {}
    env: dict = {"np": np}
    keys = []
    for k, v in enumerate(fg.inputs):
        names[v] = f"x{k}"
    lines = [f"def step({', '.join(names[v] for v in fg.inputs)}):"]

    def ref(v):
        if v in names:
            return names[v]
        if isinstance(v, Constant):
            name = f"c{len(env)}"
            env[name] = np.asarray(v.data, dtype=v.type.dtype)[()]
            keys.append((name, v.type.dtype, repr(env[name].item())))
            names[v] = name
            return name
        raise Unsupported(f"inner variable {v} computed before it is defined")

    for j, nd in enumerate(fg.toposort()):
        args = ", ".join(ref(v) for v in nd.inputs)
        outs = [f"v{j}_{m}" for m in range(len(nd.outputs))]
        if isinstance(nd.op, IDENTITY_OPS):
            lines.append(f"    {outs[0]} = {args}")
            keys.append(("identity", type(nd.op).__name__))
        else:
            fn, key = _node_kernel(nd, **kwargs)
            env[f"k{j}"] = fn
            keys.append(key)
            lhs = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
            lines.append(f"    {lhs} = k{j}({args})")
        for v, name in zip(nd.outputs, outs, strict=True):
            names[v] = name
    lines.append("    return (" + "".join(f"{ref(v)}, " for v in fg.outputs) + ")")
    return "\n".join(lines) + "\n", env, keys


def _loop_source(op, node) -> str:
    """Source of ``scan(n_steps, outer_in_1, ...)``: the stock loop's buffer handling with
    scalar taps and one ``step`` call per iteration."""
    outer = [("n_steps" if i == 0 else f"outer_in_{i}") for i in range(len(node.inputs))]
    seqs, mitmot, mitsot = op.outer_seqs(outer), op.outer_mitmot(outer), op.outer_mitsot(outer)
    sitsot, nitsot = op.outer_sitsot(outer), op.outer_nitsot(outer)
    untraced, non_seqs = op.outer_untraced_sit_sot(outer), op.outer_non_seqs(outer)
    in_taps = dict(
        zip(mitmot + mitsot + sitsot, op.info.mit_mot_in_slices + op.info.mit_sot_in_slices + op.info.sit_sot_in_slices, strict=True)
    )
    out_taps = dict(zip(mitmot, op.info.mit_mot_out_slices, strict=True))

    setup, reads, writes, post, results = [], [], [], [], []
    n_read = 0

    def read(expr):
        nonlocal n_read
        reads.append(f"x{n_read} = {expr}")
        n_read += 1

    for name in seqs:
        read(f"{name}[i]")
    out_idx = 0
    for name in mitmot + mitsot + sitsot:
        store, size = f"{name}_store", f"{name}_len"
        setup.append(f"{size} = {name}.shape[0]")
        copy = out_idx not in op.destroy_map
        setup.append(f"{store} = np.copy({name})" if copy else f"{store} = {name}")
        lookback = -min(0, min(in_taps[name]))
        for tap in in_taps[name]:
            read(f"{store}[(i + {lookback + tap}) % {size}]")
        taps = out_taps.get(name, (0,))
        for tap in taps:
            writes.append(f"{store}[(i + {lookback + tap}) % {size}] = ")
        if name not in mitmot:
            post.append(_post_proc(store, max(taps) + lookback, size))
        results.append(store)
        out_idx += 1
    for name, inner_out in zip(nitsot, op.inner_nitsot_outs(op.fgraph.outputs), strict=True):
        store, size = f"{name}_store", f"{name}_len"
        setup.append(f"{size} = {name}.item()")
        setup.append(f"{store} = np.empty(({size},), dtype=np.{np.dtype(inner_out.type.dtype).name})")
        writes.append(f"{store}[i % {size}] = ")
        post.append(_post_proc(store, 0, size))
        results.append(store)
    for name in untraced:
        read(f"{name}_state")
        setup.append(f"{name}_state = {name}[()]")
        writes.append(f"{name}_state = ")
        results.append(f"{name}_out")
        post.append(f"{name}_out = np.empty((), dtype={name}.dtype)\n{name}_out[()] = {name}_state")
    for name in non_seqs:
        setup.append(f"{name}_value = {name}[()]")
        reads.append(f"x{n_read} = {name}_value")
        n_read += 1

    args = ", ".join(f"x{k}" for k in range(n_read))
    outs = [f"y{k}" for k in range(len(writes))]
    body = [*reads, f"({''.join(o + ', ' for o in outs)}) = step({args})", *(w + o for w, o in zip(writes, outs, strict=True))]
    return (
        f"def scan({', '.join(outer)}):\n"
        + indent("\n".join(setup), "    ")
        + "\n    n = n_steps.item()\n    i = 0\n    while i < n:\n"
        + indent("\n".join(body), "        ")
        + "\n        i += 1\n"
        + indent("\n".join(post), "    ")
        + f"\n    return {', '.join(results)}\n"  # one output: the array itself, as stock
    )


def _post_proc(store: str, max_offset: int, size: str) -> str:
    """The stock loop's end of a traced buffer: rotate truncated storage so the last value
    is at the end; zero the entries a shorter run did not write."""
    return dedent(
        f"""
        if 1 < {size} < (i + {max_offset}):
            {store}_shift = (i + {max_offset}) % ({size})
            if {store}_shift > 0:
                {store} = np.concatenate(({store}[{store}_shift:], {store}[:{store}_shift]))
        elif {size} > (i + {max_offset}):
            {store}[i + {max_offset}:] = 0
        """
    ).strip()


def funcify_scalar_scan(op, node, **kwargs):
    """(numba function, cache key) of the policy Scan ``node`` as one scalar loop."""
    from numba import njit

    kwargs = {k: v for k, v in kwargs.items() if k != "storage_map"}  # the outer graph's
    step_src, env, keys = _step_source(op.fgraph, **kwargs)
    step = njit(define(step_src, **env), **KERNEL_JIT_OPTIONS)
    loop_src = _loop_source(op, node)
    scan = njit(define(loop_src, np=np, step=step), boundscheck=False, **KERNEL_JIT_OPTIONS)
    if any(k is None for k in keys):
        return scan, None
    return scan, cache_key("scalar-scan", SCAN_VERSION, op.policy.digest, step_src, loop_src, tuple(keys))
