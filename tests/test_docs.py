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
