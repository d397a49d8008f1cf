"""Build the numba function of one elemwise node: an intrinsic emitting the loop and
the scalar body, wrapped in an overload compiled with ``fastmath=False`` explicitly (so
numba's own fastmath pass never touches it and no caller's flags are inherited)."""

from __future__ import annotations

import numpy as np
from numba.core import types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from ptnumba_codegen.lowering.body import PlannedBody, emit_body
from ptnumba_codegen.lowering.loop import LoopSpec, emit_elemwise_loop

KERNEL_JIT_OPTIONS = {
    "fastmath": False,  # explicit: the policy alone decides every flag of this kernel
    "error_model": "numpy",
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
}


def build_elemwise_kernel(node, spec: LoopSpec, planned: PlannedBody, name: str = "policy_elemwise"):
    """Return a Python function that numba compiles to this node's kernel."""

    @intrinsic
    def elemwise_loop(typingctx, inputs):
        if not isinstance(inputs, types.BaseTuple) or not all(
            isinstance(t, types.Array) for t in inputs.types
        ):
            raise TypingError(f"{name} expects arrays, got {inputs}")
        input_types = tuple(inputs.types)
        out_types = spec.output_types(input_types)
        ret = out_types[0] if len(out_types) == 1 else types.Tuple(out_types)

        def codegen(context, builder, sig, args):
            values = [builder.extract_value(args[0], i) for i in range(len(input_types))]
            return emit_elemwise_loop(
                context,
                builder,
                spec,
                input_types,
                values,
                lambda scalars: emit_body(context, builder, planned, scalars),
            )

        return ret(inputs), codegen

    n_out = len(node.outputs)

    def kernel(*inputs):
        # Runs only without JIT (e.g. PyTensor's python-mode checks): the op's own perform.
        storage = [[None] for _ in range(n_out)]
        node.op.perform(node, [np.asarray(i) for i in inputs], storage)
        return storage[0][0] if n_out == 1 else tuple(s[0] for s in storage)

    kernel.__name__ = name

    @overload(kernel, jit_options=KERNEL_JIT_OPTIONS)
    def _kernel_overload(*inputs):
        def impl(*inputs):
            return elemwise_loop(inputs)

        return impl

    return kernel
