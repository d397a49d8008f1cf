"""The package uses no deprecated API of PyTensor (or of numpy, numba): every module
imports, and a function with as-written copies and envelope guards compiles, with
DeprecationWarnings raised as errors where the package's own code is the caller.

pyproject.toml turns them into errors for the whole suite as well; this runs in a fresh
interpreter, so warnings issued once per process at import time (a deprecated import, an
``infer_shape`` with the old ``fgraph`` parameter, checked when the class is created)
are seen even when another test imported the module first.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    r"""
    import importlib, pkgutil, warnings
    warnings.filterwarnings("error", category=DeprecationWarning, module=r"ptnumba_codegen(\.|$)")
    import ptnumba_codegen

    optional = ("pymc", "nutpie", "jax", "asv", "matplotlib", "mpmath")
    for info in pkgutil.walk_packages(ptnumba_codegen.__path__, "ptnumba_codegen."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as err:  # a front end waiting for an optional extra
            if err.name not in optional:
                raise

    import numpy as np
    import pytensor, pytensor.tensor as pt
    x, y, z, w, b = pt.vectors("x", "y", "z", "w", "b")
    cost = pt.minimum(x * y * z * w, b).sum() + pt.switch(pt.gt(pt.log1p(pt.exp(x)), 2.0), x, 0.0).sum()
    fn = pytensor.function([x, y, z, w, b], pytensor.grad(cost, x), mode=ptnumba_codegen.policy_mode("default"))
    fn(*(np.ones(3) for _ in range(5)))
    print("ok")
    """
)


def test_no_deprecated_api_in_the_package():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
