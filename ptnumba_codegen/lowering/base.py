"""Shared vocabulary of the lowering: the typed view of one instruction (the rule's
context), the typed emitter and rule, the ``Unsupported`` signal that makes a node fall
back, and dtype -> numba type."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from dataclasses import dataclass

import numba
import numpy as np
from numba.core import types
from numba.core.registry import cpu_target


class Unsupported(Exception):
    """The generator cannot lower this; the node falls back to the stock implementation."""


@dataclass(frozen=True, eq=False)
class Emitter:
    """One planned instruction: ``emit(context, builder, args, flags) -> output values``,
    with the facts the body planner, the guards and explain read. A wrapper changes the
    emit function with `wrapped`, which keeps every fact (and wraps the alternative forms)."""

    emit: Callable[..., list]
    label: str | None = None  # a vector call, vector formula or lane calls (explain, guards)
    without_lanes: Emitter | None = None  # the same bits without lane calls
    pays_alone: bool = False  # its lane calls run as exact vector code
    scalar_form: Emitter | None = None  # scalar libm, for loops that cannot vectorize
    stock_key: tuple | None = None  # (cache key, fastmath) of the stock function it calls (or of the C function the stock one calls: rules.cython_call)
    inner_stock_keys: tuple = ()  # stock functions called by an inner body (ScalarLoop)
    opaque_call: bool = False  # it calls a function LLVM's loop vectorizer cannot widen (libm's lgamma, by name)

    def __call__(self, context, builder, args, flags) -> list:
        return self.emit(context, builder, args, flags)

    def wrapped(self, wrap: Callable[[Callable[..., list]], Callable[..., list]]) -> Emitter:
        """This emitter with ``wrap(emit)`` as its emit function, in every form it has."""
        return dataclasses.replace(
            self,
            emit=wrap(self.emit),
            without_lanes=None if self.without_lanes is None else self.without_lanes.wrapped(wrap),
            scalar_form=None if self.scalar_form is None else self.scalar_form.wrapped(wrap),
        )

    @property
    def calls_stock(self) -> bool:
        """It calls a stock function (opaque to the loop vectorizer)."""
        return self.stock_key is not None or bool(self.inner_stock_keys)

    def lanes_dropped(self) -> Emitter:
        return self if self.without_lanes is None else self.without_lanes

    def scalar(self) -> Emitter:
        return self if self.scalar_form is None else self.scalar_form


@dataclass(frozen=True, eq=False)
class Rule:
    """A row of the lowering table: ``plan(typed) -> Emitter`` (typing problems raise
    `Unsupported`), its kind (explain, tests) and whether it has several outputs."""

    plan: Callable[[Typed], Emitter]
    kind: str
    multi_output: bool = False

    def __call__(self, t: Typed) -> Emitter:
        return self.plan(t)


@dataclass(frozen=True)
class BodyLowering:
    """How a rule lowers an inner program (a ScalarLoop's), handed to it in its context
    (`Typed.bodies`) by the body planner that plans the instruction: rules never import
    the planner that uses them."""

    plan: Callable[..., object]  # (program, policy, sensitive_outputs) -> planned body
    emit: Callable[..., list]  # (context, builder, planned body, args) -> output values


@dataclass(frozen=True)
class Typed:
    """A rule's context: the numba types one instruction is lowered with, its flags, class
    and policy, the op itself and how to lower an inner program."""

    inputs: tuple[types.Type, ...]
    outputs: tuple[types.Type, ...]
    flags: tuple[str, ...] = ()
    klass: str = ""
    policy: object = None  # the Policy; rules with inner programs plan them with it
    op: object = None  # the scalar op itself (rules that read its inner graph)
    bodies: BodyLowering | None = None  # how its inner program is planned and emitted


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


def define(src: str, **env):
    """The function ``src`` defines (generated source), with ``env`` as its globals."""
    exec(compile(src, "<ptnumba_codegen>", "exec"), env)
    return env[src[4 : src.index("(")]]
