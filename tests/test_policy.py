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
    assert set(preset_names()) >= {"default", "strict", "fast"}
    default, strict, fast = (load_policy(n) for n in ("default", "strict", "fast"))
    assert default.flags_for("comparison_sensitive", "Mul") == ()
    for klass in ("reduction", "transcendental", "arithmetic"):
        assert set(default.flags_for(klass, "Mul")) == PYTENSOR_FLAGS
    for klass in CLASSES:
        assert strict.flags_for(klass, "Exp") == ()
        assert set(fast.flags_for(klass, "Exp")) == PYTENSOR_FLAGS
    assert default.classes["transcendental"].max_ulp == 4


def test_file_path_and_name(tmp_path):
    path = write(tmp_path, 'name = "mine"\n' + FULL)
    pol = load_policy(path)
    assert pol.name == "mine" and pol.source == str(path.resolve())
    assert pol.flags_for("arithmetic", "Add") == ("contract",)
    assert load_policy(str(path)) == pol


def test_env_var_sets_the_process_default(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert load_policy(None).name == "default"
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
    assert str(err.value).startswith(f"{ENV_VAR}='nosuch': unknown policy preset 'nosuch'; allowed: as_written, default, fast, strict")


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
    default, as_written = load_policy("default"), load_policy("as_written")
    assert not default.as_written and as_written.as_written
    assert as_written.classes == default.classes and as_written.parallel == default.parallel
    assert as_written.digest != default.digest  # the key is part of the identity (cache keys)
    assert pickle.loads(pickle.dumps(as_written)) == as_written
    assert pickle.loads(pickle.dumps(as_written)).as_written
    child = load_policy(write(tmp_path, 'extends = "as_written"\n[classes.reduction]\nflags = []\n', "child.toml"))
    assert child.as_written  # inherited through extends
    off = load_policy(write(tmp_path, 'extends = "as_written"\n[comparison]\nas_written = false\n', "off.toml"))
    assert not off.as_written and off.digest == default.digest
