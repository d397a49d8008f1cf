"""Turn a (LoopSpec, PlannedBody) pair into a function numba can call.

The loop is one intrinsic; it is called from an overload compiled with
``fastmath=False`` explicitly, so numba's own fastmath pass never touches it and no
caller's flags are inherited: the policy alone sets every flag. Outputs that need
finishing after the loop (reduced axes squeezed out, accumulator cast to the output
dtype, scalar results) are finished in the overload's generated Python source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba.core import types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload
from numpy.lib.stride_tricks import as_strided

from ptnumba_codegen.lowering.base import numba_type
from ptnumba_codegen.lowering.body import PlannedBody, emit_body
from ptnumba_codegen.lowering.loop import LoopSpec, emit_loop
from ptnumba_codegen.lowering.parallel import split_decision
from ptnumba_codegen.lowering.split_runtime import ensure_threading

KERNEL_JIT_OPTIONS = {
    "fastmath": False,  # explicit: the policy alone decides every flag of this kernel
    "error_model": "numpy",
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
}


@dataclass(frozen=True)
class Finish:
    """How one raw loop output becomes the node's output."""

    kind: str  # "as_is" | "squeeze" (drop reduced axes) | "scalar" | "array0d"
    out_dtype: str = ""
    kept_axes: tuple[int, ...] = ()
    cast: bool = False  # squeeze: the accumulator dtype differs from the output's

    def expr(self, raw: str) -> str:
        dt = "np.bool_" if self.out_dtype == "bool" else f"np.{self.out_dtype}"
        if self.kind == "as_is":
            return raw
        if self.kind == "scalar":
            return f"{dt}({raw})"
        if self.kind == "array0d":
            return f"np.array({raw}, dtype={dt})"
        shape = "".join(f"{raw}.shape[{k}], " for k in self.kept_axes)
        strides = "".join(f"{raw}.strides[{k}], " for k in self.kept_axes)
        view = f"as_strided({raw}, shape=({shape}), strides=({strides}))"
        return f"{view}.astype({dt})" if self.cast else view


def make_loop(spec: LoopSpec, planned: PlannedBody, name: str, chunked: bool = False, split=None):
    """The intrinsic emitting the loop nest and the scalar body."""
    body_types = [numba_type(d) for d in planned.program.output_dtypes]

    @intrinsic
    def loop(typingctx, inputs):
        if not isinstance(inputs, types.BaseTuple):
            raise TypingError(f"{name} expects a tuple of inputs, got {inputs}")
        input_types = tuple(inputs.types)
        for ty, bc in zip(input_types, spec.input_bc, strict=True):
            if (bc is None) == isinstance(ty, types.Array):
                raise TypingError(f"{name}: input type {ty} does not match the kernel spec")
        out_types = spec.output_types(input_types)
        ret = out_types[0] if len(out_types) == 1 else types.Tuple(out_types)

        def codegen(context, builder, sig, args):
            values = [builder.extract_value(args[0], i) for i in range(len(input_types))]
            return emit_loop(
                context,
                builder,
                spec,
                input_types,
                values,
                lambda b, scalars: emit_body(context, b, planned, scalars),
                body_types,
                chunked=chunked,
                split=split,
            )

        return ret(inputs), codegen

    return loop


def build_kernel(
    spec: LoopSpec,
    planned: PlannedBody,
    python_impl: Callable,
    finish: tuple[Finish, ...] | None = None,
    name: str = "policy_kernel",
    parallel=None,
    yields_to: tuple[str, ...] = (),
):
    """Return a Python function (``python_impl`` without JIT) whose numba overload is the loop.

    ``parallel`` (the policy's ``Parallel``) lets large loops split across threads, unless
    the function runs ops on other thread pools (``yields_to``, see `pools`). Every
    splittable loop is emitted the same way whatever ``parallel`` says, so the thread
    setting never changes a result bit; a body that calls stock functions is neither
    (they may need the GIL), nor a loop whose static shape is below the split threshold.
    """
    chunked, split, _why = split_decision(spec, planned, parallel, yields_to)
    if split is not None and not ensure_threading():
        split = None
    loop = make_loop(spec, planned, name, chunked, split)
    n_out = len(spec.output_dtypes)
    finish = finish or tuple(Finish("as_is") for _ in range(n_out))

    def kernel(*inputs):
        return python_impl(*inputs)

    kernel.__name__ = name

    raw = ["raw"] if n_out == 1 else [f"raw[{i}]" for i in range(n_out)]
    outs = [f.expr(r) for f, r in zip(finish, raw, strict=True)]
    ret = outs[0] if n_out == 1 else f"({', '.join(outs)},)"
    destroyed = {inp for _out, inp in spec.inplace}
    # A strided input keeps LLVM from vectorizing the loop; with libmvec calls inside that
    # costs ~8x, while a contiguous copy costs one pass over memory.
    copy_strided = planned.uses_vector_math

    def make_impl(input_types):
        args = []
        for k, ty in enumerate(input_types):
            strided = isinstance(ty, types.Array) and ty.layout == "A" and ty.ndim > 0
            if copy_strided and strided and k not in destroyed:
                args.append(f"np.ascontiguousarray(inputs[{k}])")
            else:
                args.append(f"inputs[{k}]")
        src = f"def impl(*inputs):\n    raw = loop(({''.join(a + ', ' for a in args)}))\n    return {ret}\n"
        env = {"loop": loop, "np": np, "as_strided": as_strided}
        exec(compile(src, f"<{name}>", "exec"), env)
        return env["impl"]

    @overload(kernel, jit_options=KERNEL_JIT_OPTIONS)
    def _kernel_overload(*inputs):
        return make_impl(inputs)

    return kernel


def build_scalar_kernel(planned: PlannedBody, python_impl: Callable, name: str = "policy_scalar"):
    """A kernel for scalar ops applied to native scalars: the body alone, no loop."""
    out_types = [numba_type(d) for d in planned.program.output_dtypes]
    in_types = [numba_type(d) for d in planned.program.input_dtypes]

    @intrinsic
    def scalar_body(typingctx, inputs):
        if not isinstance(inputs, types.BaseTuple) or len(inputs.types) != len(in_types):
            raise TypingError(f"{name} expects {len(in_types)} scalars, got {inputs}")
        ret = out_types[0] if len(out_types) == 1 else types.Tuple(out_types)

        def codegen(context, builder, sig, args):
            values = [
                context.cast(builder, builder.extract_value(args[0], i), ty, want)
                for i, (ty, want) in enumerate(zip(inputs.types, in_types, strict=True))
            ]
            outs = emit_body(context, builder, planned, values)
            return outs[0] if len(outs) == 1 else context.make_tuple(builder, ret, outs)

        return ret(inputs), codegen

    def kernel(*inputs):
        return python_impl(*inputs)

    kernel.__name__ = name

    @overload(kernel, jit_options=KERNEL_JIT_OPTIONS)
    def _kernel_overload(*inputs):
        def impl(*inputs):
            return scalar_body(inputs)

        return impl

    return kernel
