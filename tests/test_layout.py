"""The package layout: the import graph has no circles, no module imports a
``_private`` name of a module in another subpackage, and no emitter fact is read back by
getattr/hasattr (emitters are typed: ``ptnumba_codegen.lowering.base.Emitter``)."""

import ast

import pytest

from import_graph import MODULES, PACKAGE, ROOT, TREES
from import_graph import cycles as _cycles
from import_graph import graph as _graph
from import_graph import imports as _imports
from import_graph import resolve as _resolve


def _subpackage(name: str) -> str:
    path = MODULES[name]
    return ".".join(path.relative_to(ROOT.parent).parent.parts)


def test_the_module_import_graph_has_no_circles():
    assert _cycles(_graph()) == []


def test_no_private_name_crosses_a_subpackage_boundary():
    crossings = []
    for name, tree in TREES.items():
        here = _subpackage(name)
        module_aliases = {}
        for target, names, line in _imports(tree, top_level_only=False):
            if not names:
                continue
            for taken in names:
                if taken.startswith("_") and not taken.startswith("__") and _subpackage(target) != here:
                    crossings.append(f"{name}:{line} takes {target}.{taken}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
                for alias in node.names:
                    sub = _resolve(node.module, alias.name)
                    if sub and sub != node.module:
                        module_aliases[alias.asname or alias.name] = sub
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and _resolve(alias.name):
                        module_aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in module_aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and _subpackage(module_aliases[node.value.id]) != here
            ):
                crossings.append(f"{name}:{node.lineno} reads {module_aliases[node.value.id]}.{node.attr}")
    assert crossings == []


EMITTER_FACTS = {"label", "without_lanes", "pays_alone", "scalar_form", "stock_key", "inner_stock_keys", "multi_output"}


def _calls(*functions: str):
    """(module, call) for every call of one of ``functions`` (by bare name) in the package."""
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
                yield name, node


def test_no_emitter_fact_is_read_by_getattr_or_hasattr():
    reads = [
        f"{name}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})"
        for name, node in _calls("getattr", "hasattr", "setattr")
        if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in EMITTER_FACTS
    ]
    assert reads == []


@pytest.mark.parametrize("folder", ["analysis", "passes", "as_written", "backend", "compact", "lowering", "lowering/vecmath", "runtime", "tools"])
def test_every_folder_is_a_listed_package(folder):
    import tomllib

    import fnmatch

    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    assert (ROOT / folder / "__init__.py").is_file()
    # setuptools finds the packages (packages.find): the folder is one its patterns include
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert any(fnmatch.fnmatchcase(f"{PACKAGE}.{folder.replace('/', '.')}", pattern) for pattern in include)


def _facts(emitter):
    from ptnumba_codegen.lowering.base import Emitter

    assert isinstance(emitter, Emitter)
    return {
        "label": emitter.label,
        "without_lanes": None if emitter.without_lanes is None else _facts(emitter.without_lanes),
        "pays_alone": bool(emitter.pays_alone),
        "scalar_form": None if emitter.scalar_form is None else _facts(emitter.scalar_form),
        "stock_key": emitter.stock_key is not None,
        "inner_stock_keys": len(emitter.inner_stock_keys),
    }


def _wrapped_rows():
    from ptnumba_codegen.lowering.rules import RULES

    return sorted(
        (op for op, rule in RULES.items() if rule.plan.__qualname__.startswith("in_output_dtype.")),
        key=lambda op: op.__name__,
    )


def test_the_wrapped_rows_are_found():
    names = {op.__name__ for op in _wrapped_rows()}
    assert {"Add", "Mul", "Pow", "Sigmoid", "Softplus", "Log1mexp"} <= names


@pytest.mark.parametrize("op_class", _wrapped_rows(), ids=lambda op: op.__name__)
@pytest.mark.parametrize("preset", ["default", "fast", "strict"])
@pytest.mark.parametrize("klass", ["arithmetic", "transcendental"])
def test_a_wrapped_rule_keeps_its_unwrapped_siblings_facts(op_class, preset, klass):
    """``in_output_dtype`` casts the inputs first and keeps every fact of the rule it wraps:
    sigmoid(int32) plans as sigmoid(float64) does (vector form, scalar form, lanes)."""
    from ptnumba_codegen.lowering.rules import plan_instr
    from ptnumba_codegen.policy import load_policy

    policy = load_policy(preset)
    op = op_class()
    nin = 2 if op.nin == -1 else op.nin
    flags = policy.flags_for(klass, op_class.__name__)
    sibling = plan_instr(op, ["float64"] * nin, ["float64"], flags=flags, klass=klass, policy=policy)
    wrapped = plan_instr(op, ["int32"] + ["float64"] * (nin - 1), ["float64"], flags=flags, klass=klass, policy=policy)
    assert _facts(wrapped) == _facts(sibling)


def _string_first_args(call_name: str) -> set[str]:
    """The string literals passed first to ``call_name(...)`` anywhere in the package."""
    return {
        node.args[0].value
        for _name, node in _calls(call_name)
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
    }


def _compares_kind(tree: ast.AST, owner: str) -> list[int]:
    """Lines comparing ``owner.kind`` (an if-chain over string kinds)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(
            isinstance(side, ast.Attribute) and side.attr == "kind" and isinstance(side.value, ast.Name) and side.value.id == owner
            for side in (node.left, *node.comparators)
        )
    ]


def _class(module: str, name: str) -> ast.ClassDef:
    [cls] = [n for n in TREES[module].body if isinstance(n, ast.ClassDef) and n.name == name]
    return cls


def test_every_finish_kind_has_a_table_row_and_no_if_chain():
    from ptnumba_codegen.lowering.kernel import FINISHES, Finish

    used = _string_first_args("Finish")
    assert used and used <= set(FINISHES), used - set(FINISHES)
    assert _compares_kind(_class(f"{PACKAGE}.lowering.kernel", "Finish"), "self") == []
    for kind in FINISHES:  # every row builds an expression
        assert isinstance(Finish(kind, "float64", (0,)).expr("raw"), str)


def test_every_plan_kind_has_a_funcify_row_and_no_if_chain():
    from ptnumba_codegen.backend.dispatch import BUILDERS, FUNCIFY
    from ptnumba_codegen.explain import PLAN_NOTES

    made = _string_first_args("KernelPlan")
    assert made == set(FUNCIFY), made ^ set(FUNCIFY)
    assert set(PLAN_NOTES) <= set(FUNCIFY) and set(BUILDERS) <= set(FUNCIFY)
    for name, tree in TREES.items():
        assert _compares_kind(tree, "plan") == [], name


# Long functions are split into helpers with one job each; these modules keep them short.
MAX_FUNCTION_LINES = 60
SHORT_FUNCTION_MODULES = ("lowering.kernel", "lowering.chunks", "lowering.loop", "runtime.threads")


@pytest.mark.parametrize("module", SHORT_FUNCTION_MODULES)
def test_no_long_function(module):
    tree = TREES[f"{PACKAGE}.{module}"]
    long = [
        f"{node.name}:{node.lineno} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


# names about PyTensor's own ``Split`` op (`compact.checks`), not chunks or parts
SPLIT_OP_NAMES = {"SPLIT", "SplitSizesError", "SPLIT_SUM", "SPLIT_LENGTH_MESSAGE", "SPLIT_NEGATIVE_MESSAGE",
                  "split_function", "split_params", "split_views"}


def test_no_name_says_split():
    """"split" meant thread chunks and indexed kernels lowered as their parts: the package's
    names say ``chunk`` for the one and ``parts`` for the other (LLVM symbols, explain's
    text and the policy's wording are strings, not names). Names of PyTensor's ``Split`` op
    (`SPLIT_OP_NAMES`) are the exception."""
    names = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined = node.name
            elif isinstance(node, ast.arg):
                defined = node.arg
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined = node.id
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined = node.attr
            else:
                continue
            if "split" in defined.lower() and defined not in SPLIT_OP_NAMES:
                names.append(f"{name}:{node.lineno} {defined}")
    assert names == []
