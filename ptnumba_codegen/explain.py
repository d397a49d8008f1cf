"""What the policy did to a compiled function: per kernel node, its scalar program with
each instruction's class, flags and lowering, reduction accumulators, and fallbacks; and
under ``[comparison] as_written`` (the ``default`` preset and its alias ``as_written``; not
``rewritten``), every as-written copy (`AsWritten` node, or a copy inlined into the kernels):
which decision, how many ops its cone recomputes, what it reads, why ("[comparison]
as_written in policy default"), and the kernels it compiles to; and the compact ops off in
this process, with why (`compact.table.describe_rows_off`).

    ptnumba_codegen.explain(fn)                 # returns the report as a string
    python -m ptnumba_codegen explain script.py:fn [--ir]
"""

from __future__ import annotations

from pytensor.scan.op import Scan

import re

from ptnumba_codegen.runtime import allocator
from ptnumba_codegen.analysis.class_rules import FOLDED_EXP
from ptnumba_codegen.analysis.classify import output_needs
from ptnumba_codegen.as_written.freeze import INLINED_ATTR
from ptnumba_codegen.as_written.lowering import lowering_graph
from ptnumba_codegen.as_written.op import is_as_written
from ptnumba_codegen.backend.dispatch import entry_choices, fallback_reason
from ptnumba_codegen.lowering.chunks import chunk_decision
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.compact.table import describe_rows_off
from ptnumba_codegen.lowering.vecmath import exact_lanes
from ptnumba_codegen.lowering.vecmath.isa import isa_reason
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.lowering.rules import rule_kind
from ptnumba_codegen.backend.ops import is_policy_op
from ptnumba_codegen.analysis.robust import describe
from ptnumba_codegen.passes.pass_errors import graph_errors, node_error

_FLAG_RE = re.compile(r"\b(reassoc|nsz|arcp|contract|afn|nnan|ninf|fast)\b")
_FP_RE = re.compile(r"= (?:tail )?(fadd|fsub|fmul|fdiv|frem|fneg|fcmp|call)\b")


def _threads_note(op, plan) -> list[str]:
    if plan.spec is None:
        return []
    return [f"    threads: {chunk_decision(plan.spec, plan.body, op.policy.parallel, op.yields_to)[2]}"]


def _stock_loop_note(op, plan) -> list[str]:
    return ["    loop: the stock indexed loop around this core (gathers/scatter-adds)"]


def _parts_note(op, plan) -> list[str]:
    parts = ", ".join(
        f"{type(n.op).__name__}{' (policy)' if hasattr(n.op, 'policy') else ''}" for n in plan.stock_op.toposort()
    )
    return [f"    lowered as its parts (indexed_parts: the body calls vector functions): {parts}"]


def _no_note(op, plan) -> list[str]:
    return []


# KernelPlan.kind -> the lines explain adds about how the kernel runs
PLAN_NOTES = {"loop": _threads_note, "stock_loop": _stock_loop_note, "parts": _parts_note}


def _fmt_flags(flags) -> str:
    return "{" + ", ".join(flags) + "}" if flags else "{} (strict)"


def _inlined_lines(fgraph) -> list[str]:
    """One line per as-written copy the inline pass put back into the kernels of ``fgraph``."""
    lines = []
    for policy, label, kind, size, guards, reads in getattr(fgraph, INLINED_ATTR, ()):
        what = f"as-written copy of {label}" if kind == "decision" else f"as-written {label}"
        line = (
            f"== {what}: {size} op(s) in its cone, reads {', '.join(reads) or 'constants only'}; "
            f"inlined into the kernels below (a decision's cone there: strict, but for "
            f"producers a robust rule lets go); "
            f"why: [comparison] as_written in policy {policy}"
        )
        if guards:
            line += f"; {guards} overflow guard(s)"
        lines.append(line)
    return lines


def inner_graphs(fgraph):
    """(label, fgraph) for the function graph and every inner graph (Scan, OpFromGraph,
    AsWritten: the graph it is compiled from)."""
    yield "", fgraph
    for node in fgraph.toposort():
        if is_policy_op(node.op) and not isinstance(node.op, Scan):
            continue
        if is_as_written(node.op):
            graph = lowering_graph(node.op)
            yield _as_written_label(node), graph
            continue
        inner = getattr(node.op, "fgraph", None)
        if inner is not None and hasattr(inner, "toposort"):
            for label, sub in inner_graphs(inner):
                yield f"{type(node.op).__name__} inner graph{' / ' + label if label else ''}", sub


def _as_written_label(node) -> str:
    """'as-written copy of Le: 3 ops in its cone (Exp, Exp, Mul), reads a, c, b'."""
    op = node.op
    ops = [type(n.op).__name__ if not hasattr(n.op, "scalar_op") else str(n.op.scalar_op) for n in op.fgraph.toposort()]
    if op.kind == "decision":
        ops = ops[:-1]
    what = f"as-written copy of {op.label}" if op.kind == "decision" else f"as-written {op.label}"
    reads = ", ".join(v.name or str(v) for v in node.inputs) or "constants only"
    text = (
        f"{what}: {op.cone_size} op(s) in its cone ({', '.join(ops) or 'none'}), reads {reads}; "
        f"why: [comparison] as_written in policy {op.policy.name}"
    )
    guards = getattr(op, "_guards", 0)
    if guards:
        text += f"; {guards} overflow guard(s): the stabilized form where the as-written value is not finite"
    return text


def describe_input_facts(items) -> str:
    """``0 in [0, 1]; 1 = sum of 0 over (1,)``: the intervals and relations (`ranges`)."""
    parts = []
    for item in items:
        if item[0] == "range":
            _, pos, lo, hi = item
            parts.append(f"{pos} in [{lo:.6g}, {hi:.6g}]")
        else:
            kind, a, b, axes = item
            parts.append(f"{b} = {kind.removesuffix('_of')} of {a} over {tuple(axes)}")
    return "; ".join(parts)


def describe_formula(formula) -> str:
    """``(v0 & !v2) | v5``: the Switch conditions a lazily computed call runs under."""
    terms = [" & ".join(f"{'' if p else '!'}v{c}" for c, p in sorted(t)) for t in sorted(formula, key=sorted)]
    return " | ".join(f"({t})" if len(terms) > 1 and "&" in t else t for t in terms)


def explain_scan(node) -> list[str]:
    """A policy Scan: its loop (the inner kernels are explained with its inner graph)."""
    inner = [n for n in node.op.fgraph.toposort() if is_policy_op(n.op)]
    return [
        f"Scan: {node.op}  [policy {node.op.policy.name}]",
        f"    one loop over native scalars: {len(inner)} inner kernel(s) called as scalar bodies "
        "each step (no 0-d arrays); the inner graph below",
    ]


def explain_node(node) -> list[str]:
    op = node.op
    if isinstance(op, Scan):
        return explain_scan(node)
    head = f"{type(op).stock_class.__name__}: {op}  [policy {op.policy.name}]"
    needs = output_needs(op.sensitive_outputs)
    if needs:
        parts = [f"{p} ({', '.join(sorted(describe(r) for r in needs[p]))})" for p in sorted(needs)]
        head += f"  outputs compared downstream: {', '.join(parts)}"
    lines = [head]
    error = node_error(node)
    if error is not None and error.where:
        lines.append(f"    PASS ERROR: {error.describe()}")
    elif error is not None:  # the graph's error, printed above: what it did to this kernel
        lines.append(f"    PASS ERROR: {error.stage} failed (above): generated strict")
    known = describe_input_facts(getattr(op, "input_facts", ()))
    if known:
        lines.append(f"    inputs known: {known}")
    try:
        plan = plan_node(node)
    except Unsupported as err:
        return [*lines, f"    FALLBACK to the stock kernel: {err}"]
    failed = fallback_reason(node)  # planned, but the generator failed when numba compiled it
    if failed:
        lines.append(f"    FALLBACK to the stock kernel (at compile time): {failed}")
    else:  # known where this process compiled the kernel (not when numba's cache had it)
        for described in dict.fromkeys(choice.describe() for choice in entry_choices(node)):
            lines.append(f"    {described}")
    kinds = [
        e.label or rule_kind(i.op)
        for i, e in zip(plan.body.program.instrs, plan.body.emitters, strict=True)
    ]
    width = max((len(s) for s in plan.body.program.describe()), default=0)
    for k, ((text, klass, flags), kind) in enumerate(zip(plan.body.rows(), kinds, strict=True)):
        note = ""
        if k in plan.body.robust:
            note = "  [decides " + ", ".join(sorted(describe(r) for r in plan.body.robust[k])) + " robustly]"
        if k in plan.body.by_class:
            folded = plan.body.by_class[k][0] == FOLDED_EXP
            note += "  [folded into the class quotient reading it: class_rules]" if folded else "  [its readers decide by its class: class_rules]"
        if k in plan.body.lazy:
            note += f"  [only computed when {describe_formula(plan.body.lazy[k])}]"
        lines.append(f"    {text:<{width}}  {klass:<20} {_fmt_flags(flags):<44} {kind}{note}")
    lines.extend(PLAN_NOTES.get(plan.kind, _no_note)(op, plan))
    if plan.body.isa is not None:
        lines.append(f"    vector calls: {isa_reason(plan.spec.static_shape[-1], plan.body.isa)}")
    if plan.spec is not None and plan.spec.reduces:
        for i, red in enumerate(plan.spec.reduces):
            if red is not None:
                where = "register" if red.scalar_acc else "buffer"
                lines.append(
                    f"    output {i}: {red.op} over axes {red.axes} in {red.acc_dtype} ({where}), "
                    f"accumulator flags {_fmt_flags(red.flags)}"
                )
    if plan.body.stock_keys:
        lines.append(
            "    (instructions of kind 'stock' call the stock backend's function for that op; of kind "
            "'cython', the C function of scipy's that the stock function calls, by symbol)"
        )
    return lines


def explain(fn, ir: bool = False) -> str:
    """A report of every kernel of the compiled PyTensor function ``fn``.

    A function never called yet is compiled first (for C-contiguous inputs), so that
    kernels which fail to compile show their fallback."""
    try:
        _ensure_compiled(fn)
    except Exception:  # noqa: BLE001  (not a numba function; nothing to report from compiling)
        pass
    fgraph = fn.maker.fgraph
    out = []
    counts = {"kernels": 0, "fallbacks": 0, "as_written": 0}
    for label, graph in inner_graphs(fgraph):
        for error in graph_errors(graph):
            if not error.where:  # a node's own error is printed with the node
                out.append(f"PASS ERROR{' in ' + label if label else ''}: {error.describe()}")
                counts["pass_errors"] = counts.get("pass_errors", 0) + 1
        nodes = [n for n in graph.toposort() if is_policy_op(n.op)]
        copy = label.startswith("as-written")
        counts["as_written"] += copy
        inlined = _inlined_lines(graph)
        counts["as_written"] += len(inlined)
        if inlined and label:
            out.append(f"== {label}")
        out.extend(inlined)
        if not nodes and not copy:
            continue
        if label:
            out.append(f"== {label}")
        if copy:
            stock = [str(n.op) for n in graph.toposort() if not is_policy_op(n.op) and not is_as_written(n.op)]
            if stock:
                out.append(f"    stock kernels, numba__fastmath=False: {', '.join(stock)}")
        for node in nodes:
            lines = explain_node(node)
            if isinstance(node.op, Scan):
                counts["scalar_scans"] = counts.get("scalar_scans", 0) + 1
                out.extend(lines)
                continue
            counts["kernels"] += 1
            counts["fallbacks"] += any("FALLBACK" in line for line in lines)
            counts["pass_errors"] = counts.get("pass_errors", 0) + bool(getattr(node_error(node), "where", ""))
            out.extend(lines)
    if not counts["kernels"]:
        out.append("no kernel of this function was generated by ptnumba_codegen (compile it with policy_mode())")
    tail = f"{counts['kernels']} kernel(s), {counts['fallbacks']} fallback(s)"
    if counts.get("pass_errors"):
        tail += f", {counts['pass_errors']} pass error(s)"
    if counts.get("scalar_scans"):
        tail += f", {counts['scalar_scans']} Scan(s) as scalar loops"
    if counts["as_written"]:
        tail += f", {counts['as_written']} as-written cop{'y' if counts['as_written'] == 1 else 'ies'}"
    out.append(tail)
    rows_off = describe_rows_off()  # stock ops this process keeps: their compact op's source differs
    if rows_off:
        out.append(rows_off)
    if counts["kernels"] and allocator.state():
        out.append(f"memory: {allocator.state()}")
    if counts["kernels"]:
        out.extend(f"exact lanes: {line}" for line in exact_lanes.report())
    if ir:
        out.append("")
        out.append(final_ir_report(fn))
    return "\n".join(out)


def final_ir_report(fn) -> str:
    """The final optimized LLVM IR of ``fn``'s float instructions, flags in brackets.

    Needs the function compiled without PyTensor's disk cache (numba cannot show the IR of
    a cached function): compile under ``pytensor.config.change_flags(numba__cache=False)``.
    """
    try:
        _ensure_compiled(fn)
        modules = fn.vm.jit_fn.inspect_llvm()
    except Exception as err:  # not a numba function
        return f"(no LLVM IR available: {err})"
    text = "\n".join(modules.values())
    if not text.strip() or "Inspection disabled" in text:
        return "(no LLVM IR: the function came from the disk cache; compile with numba__cache=False)"
    lines = ["; final optimized LLVM IR, float instructions only; [flags] highlighted"]
    current, body = None, []
    for line in text.splitlines() + ["define @<end>("]:
        if line.startswith("define "):
            if body:
                lines.append(f"function {current}:")
                lines.extend(body)
            m = re.search(r"@([-\w.$]+)\(", line)
            current, body = (m.group(1)[:90] if m else "?"), []
        elif _FP_RE.search(line) and ("double" in line or "float" in line):
            body.append("  " + _FLAG_RE.sub(lambda m: f"[{m.group(1)}]", line.strip()))
    return "\n".join(lines)


def _ensure_compiled(fn) -> None:
    """numba compiles on the first call; compile a never-called function for C-contiguous inputs."""
    jit_fn = fn.vm.jit_fn
    if getattr(jit_fn, "signatures", None) or not hasattr(jit_fn, "compile"):
        return
    from numba.core import types
    from pytensor.link.numba.dispatch.basic import get_numba_type

    sig = []
    for var in fn.maker.fgraph.inputs:
        ty = get_numba_type(var.type)
        sig.append(ty.copy(layout="C") if isinstance(ty, types.Array) else ty)
    jit_fn.compile(tuple(sig))


def load_target(spec: str):
    """``path/to/script.py:NAME`` or ``package.module:NAME`` -> the object NAME.

    NAME may be a compiled PyTensor function or a zero-argument callable returning one.
    """
    import importlib
    import runpy

    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ValueError(f"expected SCRIPT.py:NAME or MODULE:NAME, got {spec!r}")
    if target.endswith(".py"):
        namespace = runpy.run_path(target, run_name="__ptnumba_explain__")
    else:
        namespace = vars(importlib.import_module(target))
    if name not in namespace:
        raise ValueError(f"{target} defines no {name!r}")
    obj = namespace[name]
    if not hasattr(obj, "maker") and callable(obj):
        obj = obj()
    if not hasattr(obj, "maker"):
        raise ValueError(f"{spec} is not a compiled PyTensor function")
    return obj


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m ptnumba_codegen explain",
        description="Show, per kernel, the class, flags and lowering of every scalar op.",
    )
    p.add_argument("target", help="SCRIPT.py:NAME or MODULE:NAME of a compiled PyTensor function")
    p.add_argument("--ir", action="store_true", help="also print the final optimized LLVM IR with flags highlighted")
    args = p.parse_args(argv)
    import pytensor

    if args.ir:  # numba can only show the IR of functions it compiled in this process
        pytensor.config.numba__cache = False
    try:
        fn = load_target(args.target)
    except (ValueError, OSError, ImportError) as err:
        print(f"error: {err}")
        return 2
    print(explain(fn, ir=args.ir))
    return 0
