"""Run a client's own test files (PyMC's distribution tests) stock and under the policy,
each in its own pytest session, and print what the policy changes.

    .venv/bin/python scripts/pymc_conformance.py ../shared/pymc_tests
    .venv/bin/python scripts/pymc_conformance.py ../shared/pymc_tests \\
        tests/distributions/test_censored.py -k "logp" -- -x
    .venv/bin/python scripts/pymc_conformance.py ../shared/pymc_tests --stock-passes FILE

FOLDER is the test folder (its README says to run pytest from there): the sessions run
with FOLDER as their working directory, ``-p compat_shims`` when FOLDER has
``compat_shims.py``, ``-p no:cacheprovider``, no bytecode written, and every file they write
(junit XML, logs, PyTensor's compile directory) in the output directory: nothing is written
into FOLDER, which may be read-only.
FILES (relative to FOLDER) narrow the selection; arguments after ``--`` go to pytest.

The policy session loads ``-p ptnumba_codegen.tools.pytest_plugin`` and imports
ptnumba_codegen from this checkout (checked before the sessions start).

Instead of a stock session, the stock result may come from a saved file:
``--stock-xml`` a stock session's junit XML, or ``--stock-passes`` a list of test ids
that pass under stock (one per line; ``--write-stock-passes`` writes one from a stock
session). With ``--stock-passes`` the policy session runs exactly the listed tests.

Exit status: 1 when a test that passes under stock fails, errors or is missing under
the policy; 2 when a session could not run; else 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import conformance_diff

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
PLUGIN = "ptnumba_codegen.tools.pytest_plugin"
SHIMS = "compat_shims"
FAILING = ("failed", "errors")
# pytest's exit codes for a session that ran: all passed, some failed, none collected
RAN = (0, 1, 5)
USAGE_ERROR = 4  # pytest's exit code, also for a node id it does not find


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    else:
        extra = []
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    ap.add_argument("folder", type=Path, help="the test folder, e.g. ../shared/pymc_tests")
    ap.add_argument("files", nargs="*", help="test files or node ids relative to FOLDER (default: all)")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression for both sessions")
    ap.add_argument("-n", "--jobs", type=int, default=2, help="xdist workers (0: no xdist); default 2")
    ap.add_argument("--out", type=Path, help="output directory (default: a new temporary one)")
    ap.add_argument("--policy", help="policy of the policy session (default: $PTNUMBA_CODEGEN_POLICY, else default)")
    saved = ap.add_mutually_exclusive_group()
    saved.add_argument("--stock-xml", type=Path, help="a saved stock session's junit XML: no stock session")
    saved.add_argument("--stock-passes", type=Path, help="a saved list of test ids passing under stock: no stock session")
    ap.add_argument("--write-stock-passes", type=Path, help="write the ids of the tests passing under stock here")
    ap.add_argument("--timeout", type=float, help="seconds after which a session is stopped (counts as not run)")
    ap.add_argument("--shared-cache", action="store_true",
                    help="use PyTensor's usual compile directory instead of a fresh one per session")
    args = ap.parse_intermixed_args(argv)  # FOLDER, options, then files: as a user types them
    args.pytest_args = extra
    if not args.folder.is_dir():
        ap.error(f"{args.folder}: not a directory")
    if args.stock_passes and (args.files or args.keyword):
        ap.error("--stock-passes runs exactly the listed tests: no FILES, no -k")
    if args.write_stock_passes and (args.stock_passes or args.stock_xml):
        ap.error("--write-stock-passes needs a stock session")
    return args


def read_ids(path: Path) -> list[str]:
    """Test ids of a ``--stock-passes`` file: one a line; lines starting with ``#`` are comments."""
    lines = (ln.strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def environment(out: Path, run: str, shared_cache: bool) -> dict:
    env = dict(os.environ)
    # this checkout's package first (before the venv's editable install), then the
    # conformance_diff plugin recording exact outcomes
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(SCRIPTS), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ (pytest's rewritten asserts too) in FOLDER
    if not shared_cache:
        flags = env.get("PYTENSOR_FLAGS", "")
        env["PYTENSOR_FLAGS"] = ",".join(filter(None, [flags, f"base_compiledir={out / ('compiledir-' + run)}"]))
    return env


def check_import_location(folder: Path, env: dict) -> str:
    """Where the sessions import ptnumba_codegen from; exits unless from this checkout."""
    where = subprocess.run(
        [sys.executable, "-c", "import ptnumba_codegen; print(ptnumba_codegen.__file__)"],
        cwd=folder, env=env, capture_output=True, text=True,
    )
    location = Path(where.stdout.strip()).resolve() if where.returncode == 0 else None
    if location is None or REPO not in location.parents:
        sys.exit(f"pymc_conformance: ptnumba_codegen imports from {location or where.stderr.strip()}, "
                 f"not from this checkout ({REPO})")
    return str(location.parent)


def pytest_command(args, run: str, junit: Path, selection: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conformance_diff"]
    if (args.folder / f"{SHIMS}.py").is_file():
        cmd += ["-p", SHIMS]
    if run == "policy":
        cmd += ["-p", PLUGIN]
        if args.policy:
            cmd += ["--ptnumba-policy", args.policy]
    if args.jobs:
        cmd += ["-n", str(args.jobs)]
    cmd += ["-q", "-rfE", "--color=no", "-o", "junit_family=xunit1", "--junitxml", str(junit)]
    if args.keyword:
        cmd += ["-k", args.keyword]
    return cmd + selection + args.pytest_args


def run_session(args, run: str, out: Path, selection: list[str], env: dict) -> tuple[int, float]:
    """Run one pytest session, its output to the terminal and to OUT/RUN.log."""
    junit = out / f"{run}.xml"
    cmd = pytest_command(args, run, junit, selection)
    print(f"\n=== {run} session ===\n$ cd {args.folder} && {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    with open(out / f"{run}.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=args.folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = None if args.timeout is None else start + args.timeout
        try:
            for chunk in iter(lambda: proc.stdout.read1(4096), b""):
                log.write(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError
            rc = proc.wait()
        except (TimeoutError, KeyboardInterrupt):
            proc.kill()
            proc.wait()
            print(f"\npymc_conformance: the {run} session was stopped", flush=True)
            rc = -1
    return rc, time.monotonic() - start


def counts(results: dict) -> str:
    tally = {col: 0 for col in conformance_diff.COLUMNS}
    for _file, outcome, _detail in results.values():
        tally[outcome] += 1
    return ", ".join(f"{n} {col}" for col, n in tally.items() if n) + f" ({len(results)} tests)"


def first_line(detail: str) -> str:
    """The error's first line (with the next one when the first is only ``Type:``)."""
    lines = [ln.strip() for ln in detail.splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    line = lines[0] if not lines[0].endswith(":") or len(lines) == 1 else f"{lines[0]} {lines[1]}"
    return line[:240]


def compare(stock: dict, policy: dict, *, missing_counts: bool) -> tuple[list[str], list[str]]:
    """Print the tests passing under one and failing under the other; the regressions
    (passing under stock, failing under the policy) and the reverse."""
    absent = (None, "missing", "")
    ids = stock.keys() | (policy.keys() if missing_counts else stock.keys() & policy.keys())
    worse, better, other = [], [], []
    for tid in sorted(ids):
        s, p = stock.get(tid, absent), policy.get(tid, absent)
        if s[1] == "passed" and (p[1] in FAILING or (p[1] == "missing" and missing_counts)):
            worse.append(tid)
        elif s[1] in FAILING and p[1] == "passed":
            better.append(tid)
        elif s[1] != p[1] and (p[1] != "missing" or missing_counts):
            other.append(tid)
    print(f"\n{len(worse)} test(s) pass under stock and fail under the policy:")
    for tid in worse:
        p = policy.get(tid, absent)
        print(f"  {tid}\n      {p[1]}: {first_line(p[2]) if p[2] else 'not run'}")
    print(f"\n{len(better)} test(s) fail under stock and pass under the policy:")
    for tid in better:
        print(f"  {tid}\n      stock {stock[tid][1]}: {first_line(stock[tid][2])}")
    if other:
        print(f"\n{len(other)} other difference(s) (stock -> policy):")
        for tid in other:
            print(f"  {tid}: {stock.get(tid, absent)[1]} -> {policy.get(tid, absent)[1]}")
    return worse, better


def stock_result(args, out: Path, env: dict, selection: list[str]):
    """(stock results, the policy session's selection, stock wall seconds or None); exits
    with 2 when the stock session does not run."""
    if args.stock_passes:
        listed = read_ids(args.stock_passes)
        print(f"stock: {len(listed)} passing test ids from {args.stock_passes}")
        return {tid: ("", "passed", "") for tid in listed}, listed, None
    if args.stock_xml:
        print(f"stock: {args.stock_xml}")
        return conformance_diff.load(args.stock_xml), selection, None
    rc, wall = run_session(args, "stock", out, selection, env)
    if rc not in RAN or not (out / "stock.xml").is_file():
        print(f"pymc_conformance: the stock session did not run (pytest exit {rc})")
        sys.exit(2)
    stock = conformance_diff.load(out / "stock.xml")
    if args.write_stock_passes:
        passing = sorted(tid for tid, (_f, outcome, _d) in stock.items() if outcome == "passed")
        header = (f"# test ids passing under stock ({len(passing)} of {len(stock)} run), read by --stock-passes;\n"
                  f"# written by scripts/pymc_conformance.py --write-stock-passes from {args.folder}\n")
        args.write_stock_passes.write_text(header + "".join(tid + "\n" for tid in passing))
        print(f"wrote {len(passing)} stock-passing test ids to {args.write_stock_passes}")
    return stock, selection, wall


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.folder = args.folder.resolve()
    out = args.out or Path(tempfile.mkdtemp(prefix="pymc-conformance-"))
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    env = {run: environment(out, run, args.shared_cache) for run in ("stock", "policy")}
    print(f"folder: {args.folder}\noutput: {out}\nptnumba_codegen: {check_import_location(args.folder, env['policy'])}")

    stock, selection, stock_wall = stock_result(args, out, env["stock"], list(args.files))
    rc, policy_wall = run_session(args, "policy", out, selection, env["policy"])
    ran = rc in RAN and (out / "policy.xml").is_file()
    if not ran:
        print(f"pymc_conformance: the policy session did not run (pytest exit {rc})")
        if rc == USAGE_ERROR and args.stock_passes:
            print(f"  (a test id of {args.stock_passes} not in {args.folder}? write a new list with "
                  "--write-stock-passes, docs/conformance.md)")
    policy = conformance_diff.load(out / "policy.xml") if (out / "policy.xml").is_file() else {}
    for run in ("stock", "policy"):
        shutil.rmtree(out / f"compiledir-{run}", ignore_errors=True)

    print("\n=== totals ===")
    if args.stock_xml:
        print(f"stock:  {counts({tid: stock[tid] for tid in policy.keys() & stock.keys()})} "
              f"(saved; of {counts(stock)})")
    elif not args.stock_passes:
        print(f"stock:  {counts(stock)} in {stock_wall:.0f} s")
    print(f"policy: {counts(policy)} in {policy_wall:.0f} s")
    # a saved junit file may cover more tests than this selection: only the tests the policy
    # session ran compare; a listed test or one of the same selection must run
    worse, _better = compare(stock, policy, missing_counts=not args.stock_xml)
    print(f"\nresults in {out} ({{stock,policy}}.{{log,xml}})")
    return 1 if worse else 0 if ran else 2


if __name__ == "__main__":
    sys.exit(main())
