"""Every policy shown in the docs loads (so the guide cannot drift from the schema)."""

import re
from pathlib import Path

import pytest

from ptnumba_codegen.policy import load_policy

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    (doc.name, k, block)
    for doc in DOCS
    for k, block in enumerate(re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S))
]


def test_docs_have_policy_examples():
    assert len([b for b in BLOCKS if b[0] == "policies.md"]) >= 5


@pytest.mark.parametrize("doc, k, block", BLOCKS, ids=[f"{d}-{k}" for d, k, _ in BLOCKS])
def test_every_toml_example_in_the_docs_loads(tmp_path, doc, k, block):
    path = tmp_path / f"example{k}.toml"
    path.write_text(block)
    policy = load_policy(path)
    assert set(policy.classes) == {"comparison_sensitive", "reduction", "transcendental", "arithmetic"}


def test_every_schema_key_is_documented():
    guide = (ROOT / "docs" / "policies.md").read_text()
    from ptnumba_codegen.flags import CLASSES, FLAG_UNIVERSE
    from ptnumba_codegen.policy import _CLASS_KEYS, _COMPARISON_KEYS, _OP_KEYS, _PARALLEL_KEYS, _TOP_KEYS

    for key in (*_TOP_KEYS, *_CLASS_KEYS, *_OP_KEYS, *_PARALLEL_KEYS, *_COMPARISON_KEYS, *CLASSES, *FLAG_UNIVERSE):
        assert any(form in guide for form in (f"`{key}`", f"{key} =", f"`{key}.", f"[{key}.")), key


# -- links ---------------------------------------------------------------------------------
# Every relative markdown link in the README, the changelog and docs/ names a file or folder
# of the repository, and every #anchor a heading of its target (GitHub's slugs). Docs that
# other work adds are listed in PENDING: a link to one is checked once the file exists.

LINKED_DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
PENDING = {"docs/compact.md", "docs/settings.md"}
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _prose(text: str) -> str:
    """The text without fenced code blocks (their lines blanked, so line numbers stay)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped but for - and _,
    spaces as hyphens (markup characters first removed)."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(path.read_text()).splitlines():
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        name, k = base, 0
        while name in found:  # GitHub numbers repeated headings: name, name-1, name-2, ...
            k += 1
            name = f"{base}-{k}"
        found.add(name)
    return found


def links(path: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(_prose(path.read_text()).splitlines(), 1):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                out.append((number, target))
    return out


def test_the_slugs_are_githubs():
    assert slug("5. The differential fuzzer") == "5-the-differential-fuzzer"
    assert slug("Robust decisions: where a cone stops") == "robust-decisions-where-a-cone-stops"
    assert slug("`as_written` against `default`") == "as_written-against-default"
    assert slug("Compile time: cold processes") == "compile-time-cold-processes"


@pytest.mark.parametrize("doc", [d for d in LINKED_DOCS if d.exists()], ids=lambda d: d.name)
def test_every_relative_link_and_anchor_resolves(doc):
    broken = []
    for number, target in links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if rel not in PENDING:
                broken.append(f"{doc.name}:{number}: {target} (no such file)")
            continue
        if anchor and (dest.is_dir() or dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{doc.name}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
