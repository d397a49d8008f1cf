"""Compare two pytest junit XML files (stock vs policy run) of PyTensor's numba tests.

Two roles:

* CLI (used by ``scripts/conformance.sh``)::

      python scripts/conformance_diff.py STOCK.xml POLICY.xml [--policy-log POLICY.log]

  prints a per-file table of outcomes for both runs and every test whose outcome
  differs, with the head of the policy run's failure. Exit status 1 if a test that
  passed on stock fails or errors with the policy, else 0.

* pytest plugin (``-p conformance_diff`` with this directory on ``PYTHONPATH``): adds a
  ``conformance_outcome`` property to every junit test case so that xpassed/xfailed/
  skipped/error are recorded exactly (plain junit cannot tell a non-strict XPASS from a
  pass). Without it the CLI falls back to inferring outcomes from the junit elements.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

PROPERTY = "conformance_outcome"
NODEID = "conformance_nodeid"
COLUMNS = ("passed", "failed", "skipped", "xfailed", "xpassed", "errors")


# --------------------------------------------------------------------------- plugin
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    wasxfail = hasattr(rep, "wasxfail")
    value = None
    if rep.when == "call":
        if rep.passed:
            value = "xpassed" if wasxfail else "passed"
        elif rep.skipped:
            value = "xfailed" if wasxfail else "skipped"
        elif rep.failed:
            text = str(rep.longrepr) if rep.longrepr is not None else ""
            value = "xpassed_strict" if text.startswith("[XPASS(strict)]") else "failed"
    elif rep.skipped:  # skipped (or xfailed) in setup
        value = "xfailed" if wasxfail else "skipped"
    elif rep.failed:  # setup / teardown error
        value = "errors"
    if value is not None:
        # junitxml writes the properties of the teardown report, which copies the item's.
        # the node id too: junit's file and classname name where a test is defined, which
        # for a test inherited from an installed package is not its module
        _record_nodeid(item.user_properties, item.nodeid)
        item.user_properties.append((PROPERTY, value))
        if rep.when == "teardown":
            _record_nodeid(rep.user_properties, item.nodeid)
            rep.user_properties.append((PROPERTY, value))


def _record_nodeid(properties: list, nodeid: str) -> None:
    if not any(name == NODEID for name, _ in properties):
        properties.append((NODEID, nodeid))


# --------------------------------------------------------------------------- parsing
def _recorded_nodeid(case: ET.Element) -> str | None:
    return next((p.get("value") for p in case.iter("property") if p.get("name") == NODEID), None)


def _file_of(case: ET.Element) -> str:
    nodeid = _recorded_nodeid(case)
    if nodeid:
        return nodeid.split("::", 1)[0]
    file = case.get("file")
    classname = case.get("classname") or ""
    # junit's file is where the test function is defined: for a test a class inherits
    # from an installed package (pymc.testing's test_distribution) not the test's module
    if file and classname.startswith(file[:-3].replace("/", ".")):
        return file
    parts = classname.split(".")
    # tests.link.numba.test_scan.TestFoo -> tests/link/numba/test_scan.py
    mods = []
    for part in parts:
        mods.append(part)
        if part.startswith("test_"):
            break
    return "/".join(mods) + ".py" if mods else "<unknown>"


def _test_id(case: ET.Element) -> str:
    nodeid = _recorded_nodeid(case)
    if nodeid:
        return nodeid
    classname = case.get("classname") or ""
    file = _file_of(case)
    module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
    rest = classname[len(module) :].lstrip(".") if module and classname.startswith(module) else ""
    parts = [file, *(rest.split(".") if rest else []), case.get("name", "")]
    return "::".join(p for p in parts if p)


def _xpass(detail: str) -> str:
    return detail if detail.startswith("[XPASS(strict)]") else "[XPASS(strict)] " + detail


def _outcome(case: ET.Element) -> tuple[str, str]:
    """(outcome, detail) of one test case; outcome is one of COLUMNS."""
    props = [p.get("value") for p in case.iter("property") if p.get("name") == PROPERTY]
    failure = case.find("failure")
    error = case.find("error")
    skipped = case.find("skipped")
    detail = ""
    for el in (error, failure, skipped):
        if el is not None:
            detail = (el.get("message") or "") + "\n" + (el.text or "")
            break
    if props:
        if "errors" in props:
            return "errors", detail
        if "failed" in props:
            return "failed", detail
        if "xpassed_strict" in props:
            return "failed", _xpass(detail)
        for value in ("xpassed", "xfailed", "skipped", "passed"):
            if value in props:
                return value, detail
    # No property (plugin not loaded, or a collection error): infer from elements.
    if error is not None:
        return "errors", detail
    if failure is not None:
        msg = failure.get("message") or ""
        if msg.startswith("[XPASS(strict)]"):
            return "failed", _xpass(detail)
        return "failed", detail
    if skipped is not None:
        if skipped.get("type") == "pytest.xfail":
            return "xfailed", detail
        return "skipped", detail
    return "passed", detail


def load(path: Path) -> dict[str, tuple[str, str, str]]:
    """test id -> (file, outcome, detail)."""
    root = ET.parse(path).getroot()
    result = {}
    for case in root.iter("testcase"):
        tid = _test_id(case)
        outcome, detail = _outcome(case)
        if tid in result:  # e.g. a test reported twice (teardown error): keep the worst
            order = ("passed", "xpassed", "xfailed", "skipped", "failed", "errors")
            if order.index(result[tid][1]) >= order.index(outcome):
                continue
        result[tid] = (_file_of(case), outcome, detail)
    return result


def summary_counts(path: Path) -> dict:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    return dict(suite.attrib) if suite is not None else {}


def head(detail: str, max_lines: int = 12) -> list[str]:
    """The informative head of a junit failure text: message, location, ``E`` lines."""
    lines = [ln.rstrip() for ln in detail.splitlines() if ln.strip()]
    if not lines:
        return []
    out = [lines[0][:300]]
    e_lines = [ln for ln in lines[1:] if ln.lstrip().startswith("E ")]
    where = [ln for ln in lines[1:] if ":" in ln and (".py:" in ln) and not ln.startswith(" ")]
    out += e_lines[:max_lines]
    if where:
        out.append(where[-1][:300])
    return out


# --------------------------------------------------------------------------- report
def table(stock: dict, policy: dict) -> list[str]:
    files = sorted({v[0] for v in stock.values()} | {v[0] for v in policy.values()})
    counts = {}
    for name, run in (("stock", stock), ("policy", policy)):
        for file, outcome, _ in run.values():
            counts.setdefault((file, name), collections.Counter())[outcome] += 1
    width = max([len(Path(f).name) for f in files] + [5])
    hdr = f"{'file':<{width}}  {'run':<6}  " + "  ".join(f"{c:>7}" for c in COLUMNS) + "  total"
    out = [hdr, "-" * len(hdr)]
    totals = {"stock": collections.Counter(), "policy": collections.Counter()}
    for file in files:
        for name in ("stock", "policy"):
            c = counts.get((file, name), collections.Counter())
            totals[name].update(c)
            out.append(
                f"{Path(file).name:<{width}}  {name:<6}  "
                + "  ".join(f"{c[col]:>7}" for col in COLUMNS)
                + f"  {sum(c.values()):>5}"
            )
    out.append("-" * len(hdr))
    for name in ("stock", "policy"):
        c = totals[name]
        out.append(
            f"{'TOTAL':<{width}}  {name:<6}  "
            + "  ".join(f"{c[col]:>7}" for col in COLUMNS)
            + f"  {sum(c.values()):>5}"
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stock", type=Path)
    ap.add_argument("policy", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--max-lines", type=int, default=12, help="E-lines shown per failure")
    args = ap.parse_args(argv)

    stock, policy = load(args.stock), load(args.policy)
    lines = table(stock, policy)
    if args.markdown:
        cols = ["file", "run", *COLUMNS, "total"]
        md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for ln in lines:
            if ln.startswith(("-", "file")):
                continue
            md.append("| " + " | ".join(ln.split()) + " |")
        lines = md
    print("\n".join(lines))

    missing = (None, "missing", "")

    def shown_outcome(entry) -> str:
        strict = entry[1] == "failed" and entry[2].startswith("[XPASS(strict)]")
        return entry[1] + (" (XPASS strict)" if strict else "")

    differ = sorted(
        tid
        for tid in stock.keys() | policy.keys()
        if shown_outcome(stock.get(tid, missing)) != shown_outcome(policy.get(tid, missing))
    )
    regressions = []
    print(f"\n{len(differ)} test(s) with a different outcome (stock -> policy):")
    for tid in differ:
        s = stock.get(tid, missing)
        p = policy.get(tid, missing)
        print(f"\n* {tid}: {shown_outcome(s)} -> {shown_outcome(p)}")
        if s[1] == "passed" and p[1] in ("failed", "errors", "missing"):
            regressions.append(tid)
        shown = p if p[1] in ("failed", "errors") else s if s[1] in ("failed", "errors") else None
        if shown is not None:
            label = "policy" if shown is p else "stock"
            for ln in head(shown[2], args.max_lines):
                print(f"    [{label}] {ln}")
    print(
        f"\n{len(regressions)} regression(s): passed on stock, failed/errored/missing with the policy."
    )
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
