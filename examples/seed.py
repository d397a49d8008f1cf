"""The seed example (../shared/seeds/000): grad(minimum(x*y*z*w, b).sum(), x) at a tie.

    python examples/seed.py                                   # values under each backend
    python -m ptnumba_codegen explain examples/seed.py:fn --ir
"""

import numpy as np
import pytensor
import pytensor.tensor as pt

import ptnumba_codegen

x, y, z, w, b = pt.vectors("x", "y", "z", "w", "b")
gx = pytensor.grad(pt.minimum(x * y * z * w, b).sum(), x)
xv = np.array([0.9887127230177662])
yv = np.array([1.000617328480952])
zv = np.array([0.9995082121912299])
wv = np.array([404.146799095179])
bv = np.array([((xv[0] * yv[0]) * zv[0]) * wv[0]])

fn = pytensor.function([x, y, z, w, b], gx, mode=ptnumba_codegen.policy_mode("default"))
fn(xv, yv, zv, wv, bv)

if __name__ == "__main__":
    print("policy default:", fn(xv, yv, zv, wv, bv))
    print(ptnumba_codegen.explain(fn))
