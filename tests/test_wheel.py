"""The presets ship as package data: an sdist holds them, the wheel built from that sdist
holds them, and the wheel installed into a fresh virtualenv (not the checkout, not the
editable install) loads every preset and compiles the seed example under each of them.

The fresh virtualenv reuses ``.venv``'s dependencies without network through a ``.pth``
line naming ``.venv``'s site-packages (a plain path: the editable install's own ``.pth``
there is not processed, so it cannot shadow the wheel). One subprocess compiles everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from ptnumba_codegen.policy import preset_names
from test_seed_and_ir import EXPECTED

ROOT = Path(__file__).resolve().parent.parent
PRESETS = preset_names()

CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    import pytensor
    import ptnumba_codegen
    from ptnumba_codegen.tools.demo import seed_graph, seed_values
    from ptnumba_codegen.policy import load_policy, preset_dir, preset_names

    (inputs, out), values = seed_graph(), seed_values()
    results = {}
    for name in preset_names():
        fn = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(name))
        results[name] = float(fn(*values)[0])
    extended = load_policy(sys.argv[1])  # `extends` by preset name, from the wheel
    print(json.dumps({
        "file": ptnumba_codegen.__file__,
        "preset_dir": str(preset_dir()),
        "results": results,
        "extended": [extended.name, extended.classes["reduction"].flags == ()],
        "as_written": [load_policy(n).as_written for n in ("as_written", "default", "rewritten")],
    }))
    """
)


def _run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{cmd}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def _build_sdist_then_wheel(tmp_path: Path) -> tuple[Path, Path]:
    dist = tmp_path / "dist"
    dist.mkdir()
    # PEP 517 backend call for the sdist (pip cannot build one). It writes egg-info into the
    # source tree, so build from a copy of what the sdist is made of: the working tree's
    # pyproject.toml, README.md and package (the tests also run on uncommitted edits).
    src = tmp_path / "src"
    _copy_tree(ROOT / "ptnumba_codegen", src / "ptnumba_codegen")
    for rel in ("pyproject.toml", "README.md"):
        (src / rel).write_bytes((ROOT / rel).read_bytes())
    name = _run(
        [sys.executable, "-c", f"import setuptools.build_meta as b; print(b.build_sdist({str(dist)!r}))"],
        cwd=src,
    ).strip().splitlines()[-1]
    sdist = dist / name
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
          "--no-build-isolation", "-w", str(dist), str(sdist)])  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    return sdist, wheel


def _copy_tree(src: Path, dst: Path) -> None:
    for path in src.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


def _fresh_venv_with_wheel(tmp_path: Path, wheel: Path) -> Path:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # Install before .venv's site-packages is visible: pip then sees no installed copy.
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
          "--no-deps", "--no-index", str(wheel)])  # fmt: skip
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    (site / "zz_reuse_dot_venv.pth").write_text("".join(f"{p}\n" for p in _dependency_dirs()))
    return python


def _dependency_dirs() -> list[str]:
    """This interpreter's site-packages directories, in import order: .venv's, or those of
    scripts/pytensor_floor.sh's environment (its own, then .venv's). Not the checkout."""
    own = sysconfig.get_paths()["purelib"]
    dirs = [own] + [p for p in sys.path if p.rstrip("/").endswith("site-packages")]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir() and Path(d).resolve() != ROOT]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("wheel")
    sdist, wheel = _build_sdist_then_wheel(tmp_path)
    return tmp_path, sdist, wheel


def test_sdist_and_wheel_hold_every_preset(built):
    _, sdist, wheel = built
    with tarfile.open(sdist) as tar:
        in_sdist = {Path(n).name for n in tar.getnames() if "/ptnumba_codegen/policies/" in n}
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = {Path(n).name for n in zf.namelist() if n.startswith("ptnumba_codegen/policies/")}
    expected = {f"{name}.toml" for name in PRESETS}
    assert in_sdist == expected
    assert in_wheel == expected


def test_installed_wheel_loads_every_preset_and_compiles_the_seed(built):
    tmp_path, _, wheel = built
    python = _fresh_venv_with_wheel(tmp_path, wheel)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    extending = tmp_path / "mine.toml"
    extending.write_text('extends = "strict"\nname = "mine"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PTNUMBA_CODEGEN_POLICY")}
    out = json.loads(_run([str(python), str(script), str(extending)], cwd=tmp_path, env=env).splitlines()[-1])

    venv_dir = str(tmp_path / "venv")
    assert out["file"].startswith(venv_dir), out["file"]  # the wheel, not the editable install
    assert out["preset_dir"].startswith(venv_dir), out["preset_dir"]
    results = out["results"]
    assert set(results) == set(PRESETS)
    assert results["default"] == pytest.approx(EXPECTED)
    assert results["rewritten"] == pytest.approx(EXPECTED)
    assert results["strict"] == pytest.approx(EXPECTED)
    assert results["fast"] == 0.0
    assert "as_written" in results  # the as-written pass runs from the wheel too
    assert results["as_written"] == pytest.approx(EXPECTED)
    assert out["as_written"] == [True, True, False]  # default decides as written
    assert out["extended"] == ["mine", True]
