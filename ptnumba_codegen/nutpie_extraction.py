"""nutpie's shared data, read from its user-data record by offset, for the C wrappers of
`nutpie_wrappers`.

nutpie passes a PyMC model's shared variables (``pm.Data``) to the compiled function through
a record (``make_user_data``): for each variable the address of its data, its size and its
shape. nutpie's own ``make_extraction_fn`` reads them with numba's record indexing, one
``@overload`` per variable behind ``literal_unroll``, and builds each array with
``numba.carray(...).reshape(shape)``: numba compiles all of it in every process that
builds the wrappers of a model with data (what it costs: CHANGELOG.md, section
"nutpie").

`make_extraction` builds the same ``extract(x, user_data_)``: ``inner(x, *arrays)``, each
array C-contiguous, of the variable's dtype and rank, over the address, with the shape the
record holds now (nutpie updates the record when the data changes: read at every call). As
nutpie's, it is inlined into the wrapper (numba's ``inline="always"``), so the wrapper's
own library calls ``inner`` (`runtime.symbol_calls`: by symbol, the function's own machine
code) rather than a copy of it linked into a library of the extraction's. The
field offsets come from the record's dtype (numpy's layout), so reading is an integer load
at a constant offset; the array is put together by one intrinsic (`_array_at`). A record
whose size is not the product of its shape raises from a function of its own, so the
wrapper's ``try`` returns its code for an exception (nutpie's ``reshape`` raises inside the
inlined extraction, where the ``try`` does not see it: its cfunc prints the error and goes on).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np import numpy_support
from numba.np.arrayobj import make_array, populate_array
from pytensor.link.numba.dispatch.basic import numba_njit

SIZE_MISMATCH = "nutpie's shared data: the record's size is not the product of its shape"


@intrinsic
def _address(typingctx, ptr):
    """A void pointer as an unsigned integer."""
    if not (ptr == types.voidptr or isinstance(ptr, types.CPointer)):
        return None

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], context.get_value_type(types.uint64))

    return types.uint64(ptr), codegen


@intrinsic
def _read_u64(typingctx, address, offset):
    """The unsigned 64-bit integer at ``address + offset``."""
    if not isinstance(address, types.Integer) or not isinstance(offset, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        u64 = context.get_value_type(types.uint64)
        base, offset = (context.cast(builder, v, t, types.uint64) for v, t in zip(args, signature.args, strict=True))
        return builder.load(builder.inttoptr(builder.add(base, offset), u64.as_pointer()))

    return types.uint64(address, offset), codegen


@functools.cache
def _array_at(dtype_name: str, ndim: int):
    """An intrinsic ``(address, shape tuple of uint64) -> C-contiguous array`` of this dtype
    and rank over the data at ``address`` (no owner, like ``numba.carray``)."""
    dtype = numpy_support.from_dtype(np.dtype(dtype_name))
    aryty = types.Array(dtype, ndim, "C")

    @intrinsic
    def array_at(typingctx, address, shape):
        if not isinstance(address, types.Integer) or not isinstance(shape, types.BaseTuple) or len(shape) != ndim:
            return None

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            dims = [context.cast(builder, builder.extract_value(args[1], k), signature.args[1][k], types.intp)
                    for k in range(ndim)]
            itemsize = context.get_abi_sizeof(context.get_data_type(dtype))
            strides, step = [], intp(itemsize)
            for dim in reversed(dims):
                strides.insert(0, step)
                step = builder.mul(step, dim)
            data = builder.inttoptr(args[0], context.get_data_type(dtype).as_pointer())
            ary = make_array(aryty)(context, builder)
            populate_array(ary, data=data, shape=cgutils.pack_array(builder, dims, intp),
                           strides=cgutils.pack_array(builder, strides, intp), itemsize=intp(itemsize),
                           meminfo=None)
            return ary._getvalue()

        return aryty(address, shape), codegen

    return array_at


def _require_size_src(size, product):
    if size != product:
        raise ValueError(SIZE_MISMATCH)


# a call of its own, not inlined: numba's ``try`` in the wrapper catches what a called
# function raises, not a ``raise`` inlined into its body
_require_size = numba_njit(_require_size_src)


def record_offsets(record_dtype, key: str) -> tuple[int, int, tuple[int, ...]]:
    """Where nutpie's record keeps variable ``key``: the offsets of its data address, its
    size and each entry of its shape (bytes from the record's start)."""
    shared, base = record_dtype.fields["shared"][:2]
    offsets = []
    for part in ("data", "size"):
        sub, at = shared.fields[part][:2]
        offsets.append(base + at + sub.fields[key][1])
    shape_sub, shape_at = shared.fields["shape"][:2]
    field_dtype, field_at = shape_sub.fields[key][:2]
    ndim = field_dtype.shape[0] if field_dtype.shape else 0
    step = field_dtype.base.itemsize
    start = base + shape_at + field_at
    return offsets[0], offsets[1], tuple(start + k * step for k in range(ndim))


def extraction_source(metadata) -> tuple[str, dict]:
    """The source of ``extract(x, user_data_)`` for ``metadata`` (per variable: its record
    offsets, dtype name and rank) and the globals it reads besides ``inner``."""
    env = {"_address": _address, "_read_u64": _read_u64, "_require_size": _require_size}
    lines = ["def extract(x, user_data_):", "    at = _address(user_data_)"]
    arrays = []
    for k, ((data_at, size_at, shape_at), dtype_name, ndim) in enumerate(metadata):
        env[f"_array_at{k}"] = _array_at(dtype_name, ndim)
        dims = [f"_read_u64(at, {off})" for off in shape_at]
        lines += [f"    shape{k} = ({''.join(d + ', ' for d in dims)})"]
        product = " * ".join(f"shape{k}[{j}]" for j in range(ndim)) or "1"
        lines += [f"    _require_size(_read_u64(at, {size_at}), {product})"]
        lines += [f"    a{k} = _array_at{k}(_read_u64(at, {data_at}), shape{k})"]
        arrays.append(f"a{k}")
    lines.append(f"    return inner(x, {', '.join(arrays)})")
    return "\n".join(lines) + "\n", env


def make_extraction(inner, shared_data, shared_var_keys, record_dtype):
    """nutpie's ``make_extraction_fn(inner, shared_data, shared_var_keys, record_dtype)``,
    reading the record by offset (see above)."""
    if not shared_var_keys:

        def extract(x, user_data_):
            return inner(x)

        return numba_njit(extract, inline="always")
    metadata = [
        (record_offsets(record_dtype, key), np.dtype(shared_data[key].dtype).name, np.ndim(shared_data[key]))
        for key in shared_var_keys
    ]
    src, env = extraction_source(metadata)
    namespace = {**env, "inner": inner}
    exec(compile(src, "<ptnumba_codegen nutpie extraction>", "exec"), namespace)  # noqa: S102  (generated above)
    return numba_njit(namespace["extract"], inline="always")


__all__ = ["SIZE_MISMATCH", "extraction_source", "make_extraction", "record_offsets"]
