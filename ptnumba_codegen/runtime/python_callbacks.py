"""Compiled code calling a Python function through a named LLVM symbol.

A numba function calls ``call_python("<symbol>", (a, b, out))``: it passes a pointer to
each value (a numba array struct, or a scalar) and gets back 0 (done) or 1 (the Python
function raised; the exception and its traceback went to the ``ptnumba_codegen`` logger).
`register` binds the symbol to a Python function through a ctypes callback and
``llvm.add_symbol``, so the compiled code refers to the function by name only: it is cached
on disk like any other (PyTensor's numba cache), and a process that loads it binds the name
again when it funcifies the node that registers it, before the function is loaded.

What it is for: code that is needed rarely and costs a lot to compile. An envelope guard's
slow path (``as_written.lowering``) is compiled only when a call first leaves the box,
instead of with every function that contains the guard.

The callback holds the GIL while it runs (ctypes takes it, from any thread: a sampler's
threads too) and views the compiled code's buffers without copying; outputs are written
in place. Arrays are read as numba lays them out: ``meminfo, parent, nitems, itemsize,
data, shape[ndim], strides[ndim]``, all 8 bytes wide.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

log = logging.getLogger("ptnumba_codegen")

SYMBOL_PREFIX = "ptnumba_codegen_python_"
CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)

# numba type of a value -> (how it is stored for the call, why it can be read back as is)
PASSED_TYPES = {
    types.Array: "its numba struct, stored as is: meminfo, parent, nitems, itemsize, data, shape, strides",
    types.Float: "the value, stored at its width",
    types.Integer: "the value, stored at its width",
    types.Boolean: "the value widened to one byte (an i1's other bits are unspecified in memory)",
}


@dataclass(frozen=True)
class Slot:
    """One value the compiled code passes: an array of ``ndim`` or a scalar (``ndim`` None)."""

    dtype: str
    ndim: int | None

    def read(self, address: int, writeable: bool):
        dtype = np.dtype(self.dtype)
        if self.ndim is None:
            raw = (ctypes.c_char * dtype.itemsize).from_address(address)
            return np.frombuffer(raw, dtype=dtype)[0]
        struct = _array_struct(self.ndim).from_address(address)
        shape, strides = tuple(struct.shape), tuple(struct.strides)
        if 0 in shape:
            return np.empty(shape, dtype=dtype)
        return np.asarray(_Buffer(struct.data, shape, strides, dtype.str, readonly=not writeable))


class _Buffer:
    """A numpy view of memory the compiled code owns (the array interface, version 3)."""

    def __init__(self, data, shape, strides, typestr, readonly):
        self.__array_interface__ = {
            "data": (data, readonly),
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "version": 3,
        }


_STRUCTS: dict[int, type] = {}


def _array_struct(ndim: int) -> type:
    struct = _STRUCTS.get(ndim)
    if struct is None:
        struct = _STRUCTS[ndim] = type(
            f"NumbaArray{ndim}",
            (ctypes.Structure,),
            {
                "_fields_": [
                    ("meminfo", ctypes.c_void_p),
                    ("parent", ctypes.c_void_p),
                    ("nitems", ctypes.c_int64),
                    ("itemsize", ctypes.c_int64),
                    ("data", ctypes.c_void_p),
                    ("shape", ctypes.c_int64 * ndim),
                    ("strides", ctypes.c_int64 * ndim),
                ]
            },
        )
    return struct


@dataclass
class _Registered:
    fn: Callable
    slots: tuple[Slot, ...]
    n_outputs: int
    callback: object = None
    calls: int = 0


_REGISTERED: dict[str, _Registered] = {}
_LOCK = threading.Lock()
_FRESH = itertools.count()


def symbol_for(key) -> str:
    """The symbol of a cacheable callee (``key``: its cache key), or a fresh one (None)."""
    if key is None:
        return f"{SYMBOL_PREFIX}local_{next(_FRESH)}"
    return SYMBOL_PREFIX + hashlib.sha256(repr(key).encode()).hexdigest()[:32]


def register(symbol: str, fn: Callable, slots: tuple[Slot, ...], n_outputs: int) -> None:
    """Bind ``symbol`` to ``fn``: the compiled code's call passes ``slots`` (inputs, then the
    last ``n_outputs``, written in place); ``fn(*inputs)`` returns the outputs' values, one
    array or a tuple. A symbol bound before keeps its first function: equal keys, equal
    callees."""
    with _LOCK:
        if symbol in _REGISTERED:
            return
        entry = _REGISTERED[symbol] = _Registered(fn, tuple(slots), n_outputs)
        entry.callback = CALLBACK_TYPE(lambda address: _run(entry, symbol, address))
        llvm.add_symbol(symbol, ctypes.cast(entry.callback, ctypes.c_void_p).value)


def calls(symbol: str) -> int:
    """How many times compiled code called ``symbol`` in this process (0 if not bound)."""
    entry = _REGISTERED.get(symbol)
    return 0 if entry is None else entry.calls


def _run(entry: _Registered, symbol: str, address: int) -> int:
    try:
        entry.calls += 1
        pointers = (ctypes.c_void_p * len(entry.slots)).from_address(address)
        n_in = len(entry.slots) - entry.n_outputs
        values = [slot.read(p, writeable=j >= n_in) for j, (slot, p) in enumerate(zip(entry.slots, pointers))]
        results = entry.fn(*values[:n_in])
        if entry.n_outputs == 1 and not isinstance(results, tuple | list):
            results = (results,)
        for out, value in zip(values[n_in:], results, strict=True):
            out[...] = value
        return 0
    except BaseException:  # noqa: BLE001 (the compiled caller raises; this keeps the cause)
        log.exception("ptnumba_codegen: the Python function behind %s raised", symbol)
        return 1


def slot_of(numba_type) -> Slot | None:
    """The slot for a value of ``numba_type``, or None if `PASSED_TYPES` has no row for it."""
    if not isinstance(numba_type, tuple(PASSED_TYPES)):
        return None
    if isinstance(numba_type, types.Array):
        return Slot(str(numba_type.dtype), numba_type.ndim)
    return Slot("bool" if isinstance(numba_type, types.Boolean) else str(numba_type), None)


@intrinsic
def call_python(typingctx, symbol, values):
    """``call_python("<symbol>", (v0, v1, ...))``: int32 0 if the bound function ran, 1 if
    it raised. Each value is passed by pointer (`PASSED_TYPES`)."""
    if not isinstance(symbol, types.StringLiteral) or not isinstance(values, types.BaseTuple):
        return None
    if any(slot_of(t) is None for t in values):
        return None
    name = symbol.literal_value

    def codegen(context, builder, signature, args):
        _, tup = args
        return emit_call(builder, name, [(builder.extract_value(tup, j), ty) for j, ty in enumerate(values)])

    return types.int32(symbol, values), codegen


def emit_call(builder, name: str, values: list) -> ir.Value:
    """`call_python`'s code, for ``(value, numba type)`` pairs already in hand (an
    intrinsic's): the int32 status of the function bound to ``name``."""
    pointers = cgutils.alloca_once(builder, I8P, size=len(values))
    for j, (value, ty) in enumerate(values):
        if isinstance(ty, types.Boolean):
            value = builder.zext(value, ir.IntType(8))
        stored = cgutils.alloca_once_value(builder, value)
        builder.store(builder.bitcast(stored, I8P), builder.gep(pointers, [ir.Constant(I32, j)]))
    callee = cgutils.get_or_insert_function(builder.module, ir.FunctionType(I32, [I8P.as_pointer()]), name)
    return builder.call(callee, [pointers])
