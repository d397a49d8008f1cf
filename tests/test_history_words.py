"""Code, comments and docstrings say what and why, never when: no development history in the
package, the tests, the scripts, the examples or the preset files.

History lives in CHANGELOG.md and current figures in docs/benchmarks.md. Here every text
file of those folders is read (tracked or not, so a new file is checked before its first
commit) and searched for

- numbers of this project's issues, development stops and milestones, and development branch
  names (`HISTORY_WORDS`);
- ``#N`` references that do not name their upstream project (`UPSTREAM_PROJECTS`): an
  upstream issue is written ``project#N`` (``numba#9554``, ``pytensor#2187``), never as
  "numba's issue N" nor as a bare ``#N``;
- citations of CHANGELOG.md or docs/benchmarks.md by a quoted title the file does not hold
  (docs/benchmarks.md keeps current results only; older measurements are in the changelog).

A line that must keep such text (a third party's message quoted verbatim, say) goes in
`ALLOWED`, by file and the exact text allowed on that line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("ptnumba_codegen", "tests", "scripts", "examples")
SUFFIXES = {".py", ".pyi", ".toml", ".sh", ".md", ".txt", ".cfg", ".ini", ".json", ".yaml", ".yml"}

# pattern -> what it catches. Each needs a number (or a branch's hyphen) right after the word,
# so ordinary prose ("a cone stops", "the generator's bodies", "a branch taken") passes.
HISTORY_WORDS = {
    r"\b[Ss]tops? #?[0-9]+": "a development stop",
    r"\b[Ii]ssues? #?[0-9]+": "an issue number (this project's: drop it; upstream: write project#N)",
    r"\b[Ii]tems? [0-9]+ of (?:the )?issue": "an item of an issue",
    r"\b[Gg]enerators? [0-9]+\b": "the generator's development milestone (a runtime value prints as generator {...})",
    r"\b[Bb]ranch(?:es)? [a-z0-9]+-[a-z0-9]": "a development branch",
    r"\b[Tt]he issue's\b": "this project's issue (say what the criterion or example is)",
}
_HISTORY = re.compile("|".join(f"(?:{p})" for p in HISTORY_WORDS))

# Projects whose issues and pull requests the code may cite as project#N.
UPSTREAM_PROJECTS = frozenset({
    "pytensor", "pymc", "pymc-extras", "nutpie", "numba", "llvmlite", "llvm", "numpy", "scipy",
    "jax", "openblas", "glibc", "cpython", "python", "hypothesis", "asv", "bambi",
})
_REFERENCE = re.compile(r"(?<![\w&/#%])([A-Za-z][\w.-]*)?#([0-9]+)\b")

# file (relative to the root, posix) -> texts allowed on a line of it that a check above would
# flag: the allowance covers that text only, not the rest of its line.
ALLOWED: dict[str, tuple[str, ...]] = {
    "ptnumba_codegen/lowering/rules.py": ("Type of #" "1 arg mismatch",),  # LLVM's message, verbatim
}

# A citation: the file, then one or more quoted titles ("A", "B").
_CITATION = re.compile(r'(CHANGELOG\.md|docs/benchmarks\.md)(?:, section)?[,:] +((?:"[^"]+"(?:, )?)+)')


def text_files() -> list[Path]:
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                out.append(path)
    return out


FILES = text_files()


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _without_allowed(rel: str, line: str) -> str:
    for text in ALLOWED.get(rel, ()):
        line = line.replace(text, " " * len(text))
    return line


def history_findings(rel: str, text: str) -> list[str]:
    """``path:line: what`` for every history word and every reference without its project."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = _without_allowed(rel, line)
        for m in _HISTORY.finditer(line):
            what = next(why for pattern, why in HISTORY_WORDS.items() if re.fullmatch(pattern, m.group(0)))
            found.append(f"{rel}:{number}: {m.group(0)!r}: {what}")
        for m in _REFERENCE.finditer(line):
            project = m.group(1)
            if project is None or project.lower() not in UPSTREAM_PROJECTS:
                found.append(f"{rel}:{number}: {m.group(0)!r}: not an upstream project#N "
                             f"(projects: {', '.join(sorted(UPSTREAM_PROJECTS))}; else ALLOWED)")
    return found


def _flat(text: str) -> str:
    """``text`` as one line: comment markers at line starts and bold markers gone, every run
    of whitespace one space (a title may wrap across comment or docstring lines)."""
    text = re.sub(r"\n[ \t]*#+[ \t]?", "\n", text)
    return " ".join(text.replace("**", "").split())


def _headings(path: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", path.read_text(), re.M)}


def citation_findings(rel: str, text: str) -> list[str]:
    """``path: what`` for every quoted title cited from CHANGELOG.md (anywhere in its text)
    or docs/benchmarks.md (one of its headings) that the file does not hold."""
    changelog = _flat((ROOT / "CHANGELOG.md").read_text())
    headings = _headings(ROOT / "docs" / "benchmarks.md")
    found = []
    for m in _CITATION.finditer(_flat(text)):
        for title in re.findall(r'"([^"]+)"', m.group(2)):
            held = title in changelog if m.group(1) == "CHANGELOG.md" else title in headings
            if not held:
                found.append(f"{rel}: {m.group(1)}, {title!r}: no such {'text' if m.group(1) == 'CHANGELOG.md' else 'heading'}")
    return found


def test_the_folders_are_read():
    names = {_rel(p) for p in FILES}
    assert "ptnumba_codegen/__init__.py" in names and "tests/test_history_words.py" in names
    assert any(n.startswith("ptnumba_codegen/policies/") and n.endswith(".toml") for n in names)
    assert any(n.startswith("scripts/") for n in names) and any(n.startswith("examples/") for n in names)


@pytest.mark.parametrize(
    "line, caught",
    [
        ("(is" + "sue 20: a warm compile)", True),
        ("(Is" + "sue 3)", True),
        ("the rule before st" + "op 49", True),
        ("Stop" + "s 45 and 46", True),
        ("held out up to gener" + "ator 19", True),
        ("merged from bra" + "nch aw-gp", True),
        ("the is" + "sue's two examples", True),
        ("PyTensor is" + "sue 2187", True),
        ("(#" + "20)", True),
        ("see aw#" + "20", True),
        ("numba#" + "9554", False),
        ("pytensor#" + "2187, PyMC#" + "1234", False),
        ("a cone stops where a decision cannot depend on rounding", False),
        ("the generator's bodies wrap; generator {GENERATOR_VERSION}", False),
        ("a branch taken per element; Issues are welcome", False),
    ],
)
def test_the_patterns_catch_history_and_pass_upstream_references(line, caught):
    assert bool(history_findings("x.py", line)) is caught, history_findings("x.py", line)


def test_allowed_text_is_allowed_and_only_there():
    line = "fails (``Type of #" + "1 arg mismatch``)"
    assert history_findings("ptnumba_codegen/lowering/rules.py", line) == []
    assert history_findings("ptnumba_codegen/lowering/loop.py", line) != []
    assert history_findings("ptnumba_codegen/lowering/rules.py", line + " (#" + "7)") != []


def test_every_allowance_is_still_needed():
    stale = []
    for rel, texts in ALLOWED.items():
        path = ROOT / rel
        body = path.read_text() if path.exists() else ""
        stale += [f"{rel}: {t!r}" for t in texts if t not in body]
    assert not stale, "ALLOWED entries that no longer occur:\n" + "\n".join(stale)


def test_no_history_words():
    found = []
    for path in FILES:
        found += history_findings(_rel(path), path.read_text(errors="replace"))
    assert not found, (
        "history belongs in CHANGELOG.md: say what the code does and why, and write upstream "
        "references as project#N\n" + "\n".join(found)
    )


def test_citations_name_what_the_cited_file_holds():
    cite = "(CHANGE" + "LOG.md, " + '"Machine code on\n# demand")'
    assert citation_findings("x.py", cite) == []
    assert citation_findings("x.py", cite.replace("CHANGELOG.md", "docs/benchmarks.md")) != []
    assert citation_findings("x.py", cite.replace("Machine", "Mach" + "ine readable")) != []
    found = []
    for path in FILES:
        found += citation_findings(_rel(path), path.read_text(errors="replace"))
    assert not found, "\n".join(found)
