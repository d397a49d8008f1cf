"""Policy files: presets, schema validation, overrides, process default, identity."""

import pickle
import textwrap

import pytest

from ptnumba_codegen.flags import CLASSES, FLAG_UNIVERSE, PYTENSOR_FLAGS
from ptnumba_codegen.policy import ENV_VAR, PolicyError, load_policy, preset_names

FULL = textwrap.dedent(
    """
    [classes.comparison_sensitive]
    flags = []
    [classes.reduction]
    flags = ["reassoc"]
    [classes.transcendental]
    flags = ["afn"]
    [classes.arithmetic]
    flags = ["contract"]
    """
)


def write(tmp_path, text, name="p.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_presets_have_the_documented_flags():
    assert set(preset_names()) == {"default", "rewritten", "as_written", "strict", "fast"}
    default, rewritten, strict, fast = (load_policy(n) for n in ("default", "rewritten", "strict", "fast"))
    for pol in (default, rewritten):
        assert pol.flags_for("comparison_sensitive", "Mul") == ()
        assert set(pol.flags_for("reduction", "Mul")) == PYTENSOR_FLAGS
        for klass in ("transcendental", "arithmetic"):  # an element: no reordering flags
            assert set(pol.flags_for(klass, "Mul")) == {"nsz", "afn"}
        assert pol.classes["transcendental"].max_ulp == 4
    assert default.as_written and not rewritten.as_written
    for klass in CLASSES:
        assert strict.flags_for(klass, "Exp") == ()
        assert set(fast.flags_for(klass, "Exp")) == PYTENSOR_FLAGS


PYTENSOR_SET = ["reassoc", "nsz", "arcp", "contract", "afn"]


def _content(classes, max_ulp=None, as_written=False):
    """`Policy.as_data` of a policy without ops and with the default ``[parallel]``, from
    the flag lists per class as written in its TOML file."""
    return {
        "classes": {k: {"flags": classes[k], "max_ulp": float((max_ulp or {}).get(k, 0))} for k in CLASSES},
        "ops": {},
        "parallel": {"threads": "auto", "min_elements": 65536},
        "comparison": {"as_written": as_written},
    }


# The presets' contents written out here (not loaded): `default` and `rewritten` differ in
# where decisions are computed only; an element's arithmetic gets neither reassoc, contract
# nor arcp in either (its value depends on its inputs only), a reduction's accumulator
# PyTensor's set; strict and fast never extended `default`.
ELEMENT_SET = ["nsz", "afn"]
DEFAULT_FLAGS = _content(
    {"comparison_sensitive": [], "reduction": PYTENSOR_SET, "transcendental": ELEMENT_SET, "arithmetic": ELEMENT_SET},
    max_ulp={"transcendental": 4},
)
OLD_STRICT = _content({k: [] for k in CLASSES})
OLD_FAST = _content({k: PYTENSOR_SET for k in CLASSES})


def test_rewritten_is_default_deciding_on_the_rewritten_graph_in_every_field():
    rewritten = load_policy("rewritten")
    assert rewritten.as_data() == DEFAULT_FLAGS
    assert dict(rewritten.ops) == {} and rewritten.as_written is False
    assert rewritten.name == "rewritten" and "rewritten graph" in rewritten.description
    assert "numba__fastmath=False" in rewritten.description


def test_default_decides_as_written_and_differs_from_rewritten_only_there():
    default = load_policy("default")
    assert default.as_written is True
    assert default.as_data() == DEFAULT_FLAGS | {"comparison": {"as_written": True}}
    assert default.name == "default" and "as written" in default.description
    assert 'Mode(linker="numba", optimizer=None)' in default.description
    assert "numba__fastmath=False" in default.description
    alias = load_policy("as_written")  # kept for code written before the switch
    assert alias.name == "as_written" and alias == default and alias.as_data() == default.as_data()


def test_strict_and_fast_are_unchanged_flag_for_flag():
    assert load_policy("strict").as_data() == OLD_STRICT
    assert load_policy("fast").as_data() == OLD_FAST
    assert not load_policy("strict").as_written and not load_policy("fast").as_written


def test_file_path_and_name(tmp_path):
    path = write(tmp_path, 'name = "mine"\n' + FULL)
    pol = load_policy(path)
    assert pol.name == "mine" and pol.source == str(path.resolve())
    assert pol.flags_for("arithmetic", "Add") == ("contract",)
    assert load_policy(str(path)) == pol


def test_env_var_sets_the_process_default(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert load_policy(None).name == "default" and load_policy(None).as_written  # decides as written
    monkeypatch.setenv(ENV_VAR, "strict")
    assert load_policy(None).name == "strict"
    monkeypatch.setenv(ENV_VAR, str(write(tmp_path, FULL, "envpol.toml")))
    assert load_policy(None).name == "envpol"


def test_extends_and_op_overrides(tmp_path):
    path = write(
        tmp_path,
        """
        extends = "strict"
        [classes.reduction]
        flags = ["reassoc", "nsz"]
        [ops.Exp]
        flags = ["afn"]
        max_ulp = 1
        [ops.Mul]
        flags = ["contract"]
        apply_in_comparison_cone = true
        """,
    )
    pol = load_policy(path)
    assert pol.flags_for("reduction", "Add") == ("reassoc", "nsz")
    assert pol.flags_for("arithmetic", "Add") == ()
    assert pol.flags_for("transcendental", "Exp") == ("afn",)
    assert pol.rule_for("transcendental", "Exp").max_ulp == 1
    # an override does not reach into comparison cones unless asked to
    assert pol.flags_for("comparison_sensitive", "Exp") == ()
    assert pol.flags_for("comparison_sensitive", "Mul") == ("contract",)


def test_digest_is_content_not_layout(tmp_path):
    a = load_policy(write(tmp_path, FULL, "a.toml"))
    b = load_policy(write(tmp_path, "# comment\n" + FULL.replace("[]", "[ ]"), "b.toml"))
    c = load_policy(write(tmp_path, FULL.replace('["afn"]', '["afn", "nnan"]'), "c.toml"))
    assert a.digest == b.digest != c.digest
    assert pickle.loads(pickle.dumps(c)) == c


@pytest.mark.parametrize(
    "text, key, allowed",
    [
        ("[classes.reduction\nflags=[]", None, None),  # malformed TOML
        ("foo = 1\n" + FULL, "'foo'", "name, description, extends, classes, ops"),
        (FULL + "\n[classes.fancy]\nflags = []\n", "'classes.fancy'", "comparison_sensitive"),
        (FULL.replace('["afn"]', '["afn", "fastt"]'), "'classes.transcendental.flags'", "reassoc"),
        (FULL.replace('["afn"]', '"afn"'), "'classes.transcendental.flags'", "reassoc"),
        (FULL + "\n[classes.reduction.extra]\n", None, None),
        (FULL + '\n[ops.Expp]\nflags = []\n', "'ops.Expp'", "scalar op class names"),
        (FULL + '\n[ops.Exp]\nflagz = []\n', "'ops.Exp.flagz'", "flags, max_ulp"),
        (FULL + '\n[ops.Exp]\nflags = []\napply_in_comparison_cone = "yes"\n', "apply_in_comparison_cone", None),
        (FULL.replace('flags = ["afn"]', 'flags = ["afn"]\nmax_ulp = -1'), "'classes.transcendental.max_ulp'", None),
        ("[classes.reduction]\nflags = []\n", "'classes'", "comparison_sensitive"),
        ('extends = "nonexistent"\n' + FULL, "'extends': unknown policy preset 'nonexistent'", "default"),
        ('extends = "missing.toml"\n' + FULL, "'extends': policy file not found", None),
        (FULL + "\n[parallel]\nthreads = 0\n", "'parallel.threads'", '"auto"'),
        (FULL + '\n[parallel]\nthreads = "many"\n', "'parallel.threads'", "an integer >= 1"),
        (FULL + "\n[parallel]\nmin_elements = 0\n", "'parallel.min_elements'", None),
        (FULL + "\n[parallel]\nthread = 2\n", "'parallel.thread'", "threads, min_elements"),
        (FULL + '\n[comparison]\nas_written = "yes"\n', "'comparison.as_written'", "true, false"),
        (FULL + "\n[comparison]\nas_writen = true\n", "'comparison.as_writen'", "as_written"),
        ("comparison = 1\n" + FULL, "'comparison'", "expected a table"),
    ],
)
def test_bad_policies_fail_with_file_key_and_allowed_values(tmp_path, text, key, allowed):
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    msg = str(err.value)
    assert str(path) in msg
    if key:
        assert key in msg
    if allowed:
        assert allowed in msg


def test_extends_typo_names_the_file_and_the_key(tmp_path):
    path = write(tmp_path, 'extends = "nope"\n')
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    allowed = ", ".join(preset_names())
    assert str(err.value) == f"{path}: key 'extends': unknown policy preset 'nope'; allowed: {allowed} or a path to a .toml file"


def test_env_var_typo_names_the_variable(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "nosuch")
    with pytest.raises(PolicyError) as err:
        load_policy(None)
    assert str(err.value).startswith(f"{ENV_VAR}='nosuch': unknown policy preset 'nosuch'; allowed: as_written, default, fast, rewritten, strict")


def test_env_var_typo_fails_at_import():
    import os
    import subprocess
    import sys

    env = dict(os.environ, **{ENV_VAR: "nosuch"})
    proc = subprocess.run([sys.executable, "-c", "import ptnumba_codegen"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert f"PolicyError: {ENV_VAR}='nosuch': unknown policy preset 'nosuch'" in proc.stderr


def test_unknown_flag_message_lists_every_allowed_flag(tmp_path):
    with pytest.raises(PolicyError, match="unknown flag 'fast'") as err:
        load_policy(write(tmp_path, FULL.replace('["afn"]', '["fast"]')))
    for flag in FLAG_UNIVERSE:
        assert flag in str(err.value)


def test_unknown_preset_and_missing_file():
    with pytest.raises(PolicyError, match="unknown policy preset 'fastest'.*default.*fast.*strict"):
        load_policy("fastest")
    with pytest.raises(PolicyError, match="policy file not found"):
        load_policy("/nonexistent/p.toml")


def test_op_name_typo_suggests_the_right_case(tmp_path):
    with pytest.raises(PolicyError, match="did you mean Exp"):
        load_policy(write(tmp_path, FULL + "\n[ops.exp]\nflags = []\n"))


def test_as_written_preset_key_inheritance_and_identity(tmp_path):
    rewritten, default, as_written = load_policy("rewritten"), load_policy("default"), load_policy("as_written")
    assert not rewritten.as_written and default.as_written and as_written.as_written
    assert as_written.classes == rewritten.classes and as_written.parallel == rewritten.parallel
    assert as_written.digest != rewritten.digest  # the key is part of the identity (cache keys)
    assert as_written.digest == default.digest  # the alias: the same kernels, the same cache entries
    assert pickle.loads(pickle.dumps(as_written)) == as_written
    assert pickle.loads(pickle.dumps(as_written)).as_written
    child = load_policy(write(tmp_path, 'extends = "as_written"\n[classes.reduction]\nflags = []\n', "child.toml"))
    assert child.as_written  # inherited through extends
    off = load_policy(write(tmp_path, 'extends = "as_written"\n[comparison]\nas_written = false\n', "off.toml"))
    assert not off.as_written and off.digest == rewritten.digest
    child = load_policy(write(tmp_path, 'extends = "default"\n[classes.reduction]\nflags = []\n', "dchild.toml"))
    assert child.as_written  # a user file extending default inherits the as-written decisions
