"""How a compiled function's array results become Python objects: no unpickling per call.

numba's CPython wrapper boxes every array a function returns with
``NRT_adapt_ndarray_to_python_acqref(array, pytype, ndim, writable, dtype)``; the dtype is
read from the function's environment (a list of constants), but ``pytype`` (``np.ndarray``)
is *unpickled* at every call: ``numba_unpickle`` builds two bytes objects and an int, calls
the Python function ``numba.core.serialize._numba_unpickle``, which hashes a new tuple of
them into its memo dict and returns the same class every time. A PyMC logp+gradient function
returns two arrays, so every call pays that twice, a large part of a small model's call
(CHANGELOG.md, "Where a small call goes"). `configure()` boxes arrays with ``pytype`` read
from the environment like the dtype: the same objects are returned (the same class, dtype,
shape, strides, data and owner), without the unpickling.

It applies to functions numba compiles after it ran (wrappers compiled earlier, or loaded
from numba's cache, keep theirs). `configure()` runs once per process, when the first
function is compiled with ``policy_codegen`` (never at import), like `allocator.configure`:
a process that never compiles a policy function keeps numba's boxing, stock functions
compiled after a policy one in the same process get it too (same objects).
``PTNUMBA_CODEGEN_BOXING=numba`` keeps numba's own boxing.
"""

from __future__ import annotations


from llvmlite import ir
from numba.core import boxing as numba_boxing, cgutils, types
from numba.core.pythonapi import _boxers
from numba.np import numpy_support

from ptnumba_codegen.runtime import ProcessSetting
from ptnumba_codegen.settings import BOXING



NUMBA_BOX_ARRAY = numba_boxing.box_array  # numba's boxer (registered for types.Array), restored by `restore`


def box_array(typ, val, c):
    """numba's ``box_array`` with the array's Python type read from the environment."""
    if not c.context.enable_nrt:
        return NUMBA_BOX_ARRAY(typ, val, c)
    pyapi, builder = c.pyapi, c.builder
    dtype = c.env_manager.read_const(c.env_manager.add_const(numpy_support.as_dtype(typ.dtype)))
    pytype = c.env_manager.read_const(c.env_manager.add_const(typ.box_type))
    i32 = ir.IntType(32)
    fnty = ir.FunctionType(pyapi.pyobj, [pyapi.voidptr, pyapi.pyobj, i32, i32, pyapi.pyobj])
    fn = pyapi._get_function(fnty, name="NRT_adapt_ndarray_to_python_acqref")
    ndim = c.context.get_constant(types.int32, typ.ndim)
    writable = c.context.get_constant(types.int32, int(typ.mutable))
    aryptr = cgutils.alloca_once_value(builder, val)
    boxed = builder.call(fn, [builder.bitcast(aryptr, pyapi.voidptr), pytype, ndim, writable, dtype])
    c.context.nrt.decref(builder, typ, val)  # the box took its own reference (acqref)
    return boxed


def _apply(choice: str, environ) -> str:
    """`SETTING`'s work: arrays boxed with `box_array` from now on."""
    if choice == "numba":
        return f"numba's array boxing ({BOXING.env}=numba)"
    _boxers.functions[types.Array] = box_array
    return "arrays boxed with their Python type from the environment (no numba_unpickle per call)"


def _undo() -> None:
    _boxers.functions[types.Array] = NUMBA_BOX_ARRAY


SETTING = ProcessSetting(BOXING, _apply, _undo)
configure, restore, state = SETTING.configure, SETTING.restore, SETTING.state
