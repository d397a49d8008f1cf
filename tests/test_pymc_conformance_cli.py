"""scripts/pymc_conformance.py's command line: the folder, options and test files in any
order, pytest's own arguments after ``--``."""

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _runner():
    sys.path.insert(0, str(SCRIPTS))  # it imports its sibling conformance_diff
    try:
        spec = importlib.util.spec_from_file_location("pymc_conformance", SCRIPTS / "pymc_conformance.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


def test_files_after_options(tmp_path):
    parse = _runner().parse_args
    a = parse([str(tmp_path), "-n", "1", "--out", "o", "t/a.py", "t/b.py", "--", "-x"])
    assert (a.folder, a.files, a.jobs, str(a.out), a.pytest_args) == (tmp_path, ["t/a.py", "t/b.py"], 1, "o", ["-x"])
    a = parse([str(tmp_path), "t/a.py", "-k", "logp"])
    assert (a.files, a.keyword) == (["t/a.py"], "logp")
