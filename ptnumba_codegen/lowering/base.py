"""Shared vocabulary of the lowering: the typed view of one instruction, the
``Unsupported`` signal that makes a node fall back, and dtype -> numba type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from numba.core import types
from numba.core.registry import cpu_target


class Unsupported(Exception):
    """The generator cannot lower this; the node falls back to the stock implementation."""


Emitter = Callable[..., list]  # (context, builder, args, flags) -> output values


@dataclass(frozen=True)
class Typed:
    """The numba types one instruction is lowered with (and its policy context)."""

    inputs: tuple[types.Type, ...]
    outputs: tuple[types.Type, ...]
    flags: tuple[str, ...] = ()
    klass: str = ""
    policy: object = None  # the Policy; rules with inner programs plan them with it
    op: object = None  # the scalar op itself (rules that read its inner graph)


SUPPORTED_KINDS = "biuf"  # bool, signed, unsigned, float (no complex, no float16)


def numba_type(dtype: str) -> types.Type:
    dt = np.dtype(dtype)
    if dt.kind not in SUPPORTED_KINDS or dt == np.float16:
        raise Unsupported(f"dtype {dtype} is not supported by the generator")
    return numba.from_dtype(dt)


def typing_context():
    ctx = cpu_target.typing_context
    ctx.refresh()  # install lazily registered templates (operators, ufuncs)
    return ctx


def cast(context, builder, val, from_ty, to_ty):
    return context.cast(builder, val, from_ty, to_ty)
