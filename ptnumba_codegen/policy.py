"""Policies: TOML files that map scalar-op classes (and single ops) to LLVM fast-math flags.

Pure data: no numba, no LLVM. A policy is loaded and validated completely before any
compilation, so a typo fails with one message naming the file, the key and the allowed
values.

Schema (every key; see docs/policies.md for the guide)::

    name = "my-policy"            # optional, defaults to the file stem
    description = "..."           # optional
    extends = "default"           # optional: a preset name or a path relative to this file

    [classes.<class>]             # class in: comparison_sensitive, reduction, transcendental, arithmetic
    flags = ["reassoc", ...]      # subset of: reassoc, nsz, arcp, contract, afn, nnan, ninf
    max_ulp = 4                   # optional, >= 0: error budget for vectorized approximations (0 = scalar libm)

    [ops.<ScalarOpName>]          # a pytensor scalar op class name, e.g. Mul, Exp, Log1p
    flags = [...]                 # flags for this op outside comparison cones
    max_ulp = 1                   # optional, overrides the class budget for this op
    apply_in_comparison_cone = false  # optional: also override inside comparison cones

    [parallel]                    # optional: split large loops across numba's threads
    threads = "auto"              # "auto" (numba.get_num_threads() at call time) or an int >= 1; 1 = off
    min_elements = 65536          # loops with fewer elements run on the calling thread

    [comparison]                  # optional
    as_written = false            # true: every decision is computed from its inputs' cones
                                  # exactly as written (see ptnumba_codegen/as_written/freeze.py);
                                  # the `default` preset sets it, `rewritten` does not

Without ``extends`` every class must be given. ``[parallel]`` and ``[comparison]`` default
to the values above (inherited through ``extends``). Splitting never changes a result bit: only loops whose
outermost axis is not reduced are split, so every element and every accumulator is computed
by one thread in the sequential order.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ptnumba_codegen.flags import CLASSES, COMPARISON_SENSITIVE, FLAG_UNIVERSE, canonical_flags
from ptnumba_codegen.settings import POLICY

ENV_VAR = POLICY.env
DEFAULT_PRESET = "default"

_TOP_KEYS = ("name", "description", "extends", "classes", "ops", "parallel", "comparison")
_PARALLEL_KEYS = ("threads", "min_elements")
_COMPARISON_KEYS = ("as_written",)
_CLASS_KEYS = ("flags", "max_ulp")
_OP_KEYS = ("flags", "max_ulp", "apply_in_comparison_cone")


class PolicyError(ValueError):
    """A policy file or preset name that cannot be used."""


class PolicyLoadError(PolicyError, AssertionError):
    """A policy that cannot be loaded when a rewrite runs. PyTensor's rewrite sequence
    prints and skips a rewrite that raises, and the function would silently compile
    stock; an AssertionError it re-raises, so the user gets this error instead."""


def preset_dir() -> Path:
    """Directory holding the shipped presets: package data, ``ptnumba_codegen/policies/``.

    Found through ``importlib.resources``, so an editable install, a wheel and an sdist
    install all resolve it the same way.
    """
    where = resources.files(__package__) / "policies"
    if not isinstance(where, Path) or not where.is_dir():
        raise PolicyError(
            f"the preset directory {where} is missing or not on the file system; "
            "reinstall ptnumba_codegen (the presets are package data: ptnumba_codegen/policies/*.toml)"
        )
    return where


def preset_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in preset_dir().glob("*.toml")))


@dataclass(frozen=True)
class Rule:
    """Flags (and error budget) granted to one class or one op."""

    flags: tuple[str, ...]
    max_ulp: float = 0.0

    def as_data(self) -> dict:
        return {"flags": list(self.flags), "max_ulp": self.max_ulp}


@dataclass(frozen=True)
class OpRule(Rule):
    apply_in_comparison_cone: bool = False

    def as_data(self) -> dict:
        return super().as_data() | {"apply_in_comparison_cone": self.apply_in_comparison_cone}


@dataclass(frozen=True)
class Parallel:
    """How large loops are split across threads (see ``lowering/chunks.py``)."""

    threads: int = 0  # 0: numba.get_num_threads() at call time; 1: never split
    min_elements: int = 65536

    @property
    def enabled(self) -> bool:
        return self.threads != 1

    def as_data(self) -> dict:
        return {"threads": "auto" if self.threads == 0 else self.threads, "min_elements": self.min_elements}


@dataclass(frozen=True)
class Policy:
    name: str
    source: str
    classes: Mapping[str, Rule]
    ops: Mapping[str, OpRule] = field(default_factory=dict)
    description: str = ""
    parallel: Parallel = Parallel()
    # decisions from their inputs' cones as written (ptnumba_codegen/as_written/freeze.py)
    as_written: bool = False

    def __post_init__(self):
        object.__setattr__(self, "classes", MappingProxyType(dict(self.classes)))
        object.__setattr__(self, "ops", MappingProxyType(dict(self.ops)))

    # -- queries used by the lowering -------------------------------------------------
    def rule_for(self, klass: str, op_name: str) -> Rule:
        """The rule of one scalar operation of class ``klass``; strict classes win."""
        override = self.ops.get(op_name)
        if override is not None and (
            klass != COMPARISON_SENSITIVE or override.apply_in_comparison_cone
        ):
            return override
        return self.classes[klass]

    def flags_for(self, klass: str, op_name: str) -> tuple[str, ...]:
        return self.rule_for(klass, op_name).flags

    # -- identity ----------------------------------------------------------------------
    def as_data(self) -> dict:
        """The effective content (what the flags depend on), independent of file layout."""
        return {
            "classes": {k: self.classes[k].as_data() for k in CLASSES},
            "ops": {k: self.ops[k].as_data() for k in sorted(self.ops)},
            "parallel": self.parallel.as_data(),
            "comparison": {"as_written": self.as_written},
        }

    @cached_property  # the content is immutable; hashing ops that carry a policy asks often
    def digest(self) -> str:
        blob = json.dumps(self.as_data(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def __hash__(self):
        return hash(self.digest)

    def __eq__(self, other):
        return isinstance(other, Policy) and self.digest == other.digest

    def __repr__(self):
        return f"Policy({self.name!r}, digest={self.digest})"

    def __reduce__(self):
        return (_policy_from_data, (self.name, self.source, self.description, self.as_data()))


def _policy_from_data(name, source, description, data) -> Policy:
    classes = {k: Rule(tuple(v["flags"]), v["max_ulp"]) for k, v in data["classes"].items()}
    ops = {
        k: OpRule(tuple(v["flags"]), v["max_ulp"], v["apply_in_comparison_cone"])
        for k, v in data["ops"].items()
    }
    par = data["parallel"]
    threads = 0 if par["threads"] == "auto" else par["threads"]
    return Policy(
        name, source, classes, ops, description, Parallel(threads, par["min_elements"]),
        as_written=data["comparison"]["as_written"],
    )


# -- validation helpers ---------------------------------------------------------------


def _fail(where: str, key: str, problem: str, allowed=None):
    msg = f"{where}: key '{key}': {problem}"
    if allowed is not None:
        msg += f"; allowed: {', '.join(map(str, allowed))}"
    raise PolicyError(msg)


def _check_keys(where: str, prefix: str, table: Any, allowed: tuple[str, ...]):
    if not isinstance(table, dict):
        _fail(where, prefix, f"expected a table, got {type(table).__name__}")
    for key in table:
        if key not in allowed:
            full = f"{prefix}.{key}" if prefix else key
            _fail(where, full, "unknown key", allowed)


def _parse_flags(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(where, key, f"expected a list of flag names, got {value!r}", FLAG_UNIVERSE)
    for flag in value:
        if flag not in FLAG_UNIVERSE:
            _fail(where, key, f"unknown flag '{flag}'", FLAG_UNIVERSE)
    return canonical_flags(value)


def _parse_parallel(where: str, table: Any, base: Parallel) -> Parallel:
    _check_keys(where, "parallel", table, _PARALLEL_KEYS)
    threads, min_elements = base.threads, base.min_elements
    if "threads" in table:
        value = table["threads"]
        if value == "auto":
            threads = 0
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            threads = value
        else:
            _fail(where, "parallel.threads", f"expected \"auto\" or an integer >= 1, got {value!r}", ("\"auto\"", "an integer >= 1 (1 = never split)"))
    if "min_elements" in table:
        value = table["min_elements"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            _fail(where, "parallel.min_elements", f"expected an integer >= 1, got {value!r}")
        min_elements = value
    return Parallel(threads, min_elements)


def _parse_comparison(where: str, table: Any, base: bool) -> bool:
    _check_keys(where, "comparison", table, _COMPARISON_KEYS)
    value = table.get("as_written", base)
    if not isinstance(value, bool):
        _fail(where, "comparison.as_written", f"expected true or false, got {value!r}", ("true", "false"))
    return value


def _parse_ulp(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        _fail(where, key, f"expected a number >= 0, got {value!r}")
    return float(value)


@cache
def known_op_names() -> frozenset[str]:
    """Class names of every pytensor scalar op (what ``[ops.<name>]`` may name)."""
    import pytensor.scalar.basic  # noqa: F401  (pure Python; no numba)
    import pytensor.scalar.loop  # noqa: F401
    import pytensor.scalar.math  # noqa: F401
    from pytensor.scalar.basic import ScalarOp

    names, seen, todo = set(), set(), [ScalarOp]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:  # a class that names itself as another op adds that op's name
                seen.add(sub)
                names.add(getattr(sub, "policy_op_name", sub.__name__))
                todo.append(sub)
    return frozenset(names)


# -- loading ---------------------------------------------------------------------------


def _resolve_source(spec: str | os.PathLike, relative_to: Path | None = None) -> Path:
    text = os.fspath(spec)
    path = Path(text)
    if path.suffix == ".toml" or os.sep in text or "/" in text:
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        if not path.is_file():
            raise PolicyError(f"policy file not found: {path}")
        return path.resolve()
    preset = preset_dir() / f"{text}.toml"
    if not preset.is_file():
        raise PolicyError(
            f"unknown policy preset '{text}'; allowed: {', '.join(preset_names())} "
            "or a path to a .toml file"
        )
    return preset


def _load_file(path: Path, _seen: tuple[Path, ...] = ()) -> Policy:
    where = str(path)
    if path in _seen:
        raise PolicyError(f"{where}: key 'extends': circular extends chain")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PolicyError(f"{where}: malformed TOML: {err}") from None

    _check_keys(where, "", data, _TOP_KEYS)
    for key in ("name", "description", "extends"):
        if key in data and not isinstance(data[key], str):
            _fail(where, key, f"expected a string, got {data[key]!r}")

    if "extends" in data:
        try:
            source = _resolve_source(data["extends"], path.parent)
        except PolicyError as err:
            raise PolicyError(f"{where}: key 'extends': {err}") from None
        base = _load_file(source, (*_seen, path))
        classes, ops, parallel = dict(base.classes), dict(base.ops), base.parallel
        as_written = base.as_written
    else:
        classes, ops, parallel, as_written = {}, {}, Parallel(), False
    parallel = _parse_parallel(where, data.get("parallel", {}), parallel)
    as_written = _parse_comparison(where, data.get("comparison", {}), as_written)

    raw_classes = data.get("classes", {})
    _check_keys(where, "classes", raw_classes, CLASSES)
    for klass, table in raw_classes.items():
        prefix = f"classes.{klass}"
        _check_keys(where, prefix, table, _CLASS_KEYS)
        old = classes.get(klass)
        if "flags" not in table and old is None:
            _fail(where, f"{prefix}.flags", "missing (required when the class is not inherited)")
        flags = _parse_flags(where, f"{prefix}.flags", table["flags"]) if "flags" in table else old.flags
        ulp = (
            _parse_ulp(where, f"{prefix}.max_ulp", table["max_ulp"])
            if "max_ulp" in table
            else (old.max_ulp if old else 0.0)
        )
        classes[klass] = Rule(flags, ulp)

    missing = [k for k in CLASSES if k not in classes]
    if missing:
        _fail(where, "classes", f"missing classes {missing} (give them or use 'extends')", CLASSES)

    raw_ops = data.get("ops", {})
    if not isinstance(raw_ops, dict):
        _fail(where, "ops", "expected a table of [ops.<ScalarOpName>] tables")
    known = known_op_names()
    for op_name, table in raw_ops.items():
        prefix = f"ops.{op_name}"
        if op_name not in known:
            close = sorted(n for n in known if n.lower() == op_name.lower())
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise PolicyError(
                f"{where}: key '{prefix}': unknown scalar op '{op_name}'{hint}; allowed: "
                "pytensor scalar op class names such as Add, Mul, Exp, Log1p, Sigmoid "
                "(see ptnumba_codegen.policy.known_op_names())"
            )
        _check_keys(where, prefix, table, _OP_KEYS)
        if "flags" not in table:
            _fail(where, f"{prefix}.flags", "missing")
        flags = _parse_flags(where, f"{prefix}.flags", table["flags"])
        ulp = _parse_ulp(where, f"{prefix}.max_ulp", table["max_ulp"]) if "max_ulp" in table else 0.0
        cone = table.get("apply_in_comparison_cone", False)
        if not isinstance(cone, bool):
            _fail(where, f"{prefix}.apply_in_comparison_cone", f"expected true or false, got {cone!r}")
        ops[op_name] = OpRule(flags, ulp, cone)

    return Policy(
        name=data.get("name", path.stem),
        source=where,
        classes=classes,
        ops=ops,
        description=data.get("description", ""),
        parallel=parallel,
        as_written=as_written,
    )


def load_policy(spec: str | os.PathLike | Policy | None = None) -> Policy:
    """A policy from a preset name (``default``, ``rewritten``, ``strict``, ``fast``,
    ``as_written``: `preset_names`), a TOML path, or a Policy.

    ``None`` gives the process default: the ``PTNUMBA_CODEGEN_POLICY`` environment variable,
    else the ``default`` preset (decisions as written; ``rewritten`` decides on the rewritten
    graph, and ``as_written`` is an alias of ``default``).
    """
    if isinstance(spec, Policy):
        return spec
    chosen = POLICY.value() if spec is None else ""
    if chosen:
        try:
            return load_policy(chosen)
        except PolicyError as err:
            raise PolicyError(f"{ENV_VAR}={chosen!r}: {err}") from None
    path = _resolve_source(DEFAULT_PRESET if spec is None else spec)
    return _load_cached(str(path), path.stat().st_mtime_ns)


@cache
def _load_cached(path: str, _mtime: int) -> Policy:
    return _load_file(Path(path))
