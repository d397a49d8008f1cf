"""The elemwise loop emitter: broadcasting checks, output allocation, the loop nest and
the per-element loads/stores around the scalar body.

Shape checks, output allocation and the return convention reuse PyTensor's own helpers
(``pytensor.link.numba.dispatch.vectorize_codegen``), so error messages, inplace handling
and reference counting are the stock backend's. The loop nest and the scalar body are
emitted here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from numba.core import cgutils, types
from numba.np import arrayobj
from pytensor.link.numba.dispatch.vectorize_codegen import (
    _codegen_return_outputs,
    compute_itershape,
    make_outputs,
)


@dataclass(frozen=True)
class LoopSpec:
    """Everything static about one elemwise loop (part of the cache key)."""

    input_bc: tuple[tuple[bool, ...], ...]
    output_bc: tuple[tuple[bool, ...], ...]
    output_dtypes: tuple[str, ...]
    inplace: tuple[tuple[int, int], ...]  # (output index, input index)

    @property
    def ndim(self) -> int:
        return len(self.output_bc[0]) if self.output_bc else 0

    def output_types(self, input_types) -> list[types.Type]:
        inplace = dict(self.inplace)
        return [
            input_types[inplace[i]]
            if i in inplace
            else types.Array(numba.from_dtype(np.dtype(dt)), self.ndim, "C")
            for i, dt in enumerate(self.output_dtypes)
        ]


class _AliasScopes:
    """Scoped-noalias metadata: inputs never alias outputs except a destroyed input."""

    def __init__(self, builder, n_outputs, inplace):
        mod = builder.module
        domain = mod.add_metadata([], self_ref=True)
        input_scope = mod.add_metadata([domain], self_ref=True)
        out_scopes = [mod.add_metadata([domain], self_ref=True) for _ in range(n_outputs)]
        self.input_set = mod.add_metadata([input_scope])
        self.output_set = mod.add_metadata(out_scopes)
        self.out_alias = [mod.add_metadata([s]) for s in out_scopes]
        self.out_noalias = [
            mod.add_metadata([input_scope, *(o for o in out_scopes if o is not s)]) for s in out_scopes
        ]
        self.destroyed = {inp: out for out, inp in inplace}

    def tag_load(self, instr, input_index):
        out = self.destroyed.get(input_index)
        if out is None:
            instr.set_metadata("alias.scope", self.input_set)
            instr.set_metadata("noalias", self.output_set)
        else:
            instr.set_metadata("alias.scope", self.out_alias[out])
            instr.set_metadata("noalias", self.out_noalias[out])

    def tag_store(self, instr, output_index):
        instr.set_metadata("alias.scope", self.out_alias[output_index])
        instr.set_metadata("noalias", self.out_noalias[output_index])


def _item_pointer(context, builder, array, array_type, indices):
    return cgutils.get_item_pointer2(
        context,
        builder,
        array.data,
        cgutils.unpack_tuple(builder, array.shape),
        cgutils.unpack_tuple(builder, array.strides),
        array_type.layout,
        indices,
        False,  # wraparound
        False,  # boundscheck
    )


def emit_elemwise_loop(
    context,
    builder,
    spec: LoopSpec,
    input_types,
    input_values,
    body: Callable[[list], list],
):
    """Emit the whole elemwise kernel; ``body(scalars) -> scalars`` emits one element."""
    arrays = [
        arrayobj.make_array(ty)(context, builder, val)
        for ty, val in zip(input_types, input_values, strict=True)
    ]
    in_shapes = [cgutils.unpack_tuple(builder, a.shape) for a in arrays]
    iter_shape = compute_itershape(context, builder, in_shapes, spec.input_bc, None)
    outputs, output_types = make_outputs(
        context,
        builder,
        iter_shape,
        spec.output_bc,
        spec.output_dtypes,
        spec.inplace,
        arrays,
        input_types,
        [[] for _ in spec.output_dtypes],
    )
    scopes = _AliasScopes(builder, len(outputs), spec.inplace)
    zero = context.get_constant(types.intp, 0)

    loops = [cgutils.for_range(builder, length) for length in iter_shape]
    indices = [loop.__enter__().index for loop in loops]

    scalars = []
    for k, (arr, ty, bc) in enumerate(zip(arrays, input_types, spec.input_bc, strict=True)):
        idx = [zero if b else i for i, b in zip(indices, bc, strict=True)]
        raw = builder.load(_item_pointer(context, builder, arr, ty, idx))
        scalars.append(context.data_model_manager[ty.dtype].from_data(builder, raw))
        scopes.tag_load(raw, k)

    results = body(scalars)

    for k, (arr, ty, bc, val) in enumerate(zip(outputs, output_types, spec.output_bc, results, strict=True)):
        idx = [zero if b else i for i, b in zip(indices, bc, strict=True)]
        data = context.data_model_manager[ty.dtype].as_data(builder, val)
        scopes.tag_store(builder.store(data, _item_pointer(context, builder, arr, ty, idx)), k)

    for loop in reversed(loops):
        loop.__exit__(None, None, None)

    return _codegen_return_outputs(context, builder, _ReturnSig(output_types), outputs, spec.inplace)


class _ReturnSig:
    """The part of a numba Signature `_codegen_return_outputs` reads."""

    def __init__(self, output_types):
        self.return_type = output_types[0] if len(output_types) == 1 else types.Tuple(output_types)
