"""The maintainer's counter-example from the seed thread (../shared/seeds/000): fast_run
rewrites exp(a)*exp(c) into exp(a + c), so the tie in grad(minimum(exp(a)*exp(c), b), a)
is lost under every policy that decides on the rewritten graph (`rewritten`, `strict`,
`fast`); `default` (alias `as_written`) decides as written.

    python examples/maintainer.py                              # the values and the report
    python -m ptnumba_codegen explain examples/maintainer.py:fn
"""

import numpy as np
import pytensor
import pytensor.tensor as pt

import ptnumba_codegen

a, c, b = pt.vectors("a", "c", "b")
ga = pytensor.grad(pt.minimum(pt.exp(a) * pt.exp(c), b).sum(), a)
AV = np.array([-2.486104997138254])
CV = np.array([-1.5791369604234018])
BV = np.exp(AV) * np.exp(CV)

fn = pytensor.function([a, c, b], ga, mode=ptnumba_codegen.policy_mode("default"))
fn(AV, CV, BV)

if __name__ == "__main__":
    rewritten = pytensor.function([a, c, b], ga, mode=ptnumba_codegen.policy_mode("rewritten"))
    print("policy rewritten:", rewritten(AV, CV, BV))  # [0.]
    print("policy default:  ", fn(AV, CV, BV))  # [0.01715884] (as written)
    print(ptnumba_codegen.explain(fn))
