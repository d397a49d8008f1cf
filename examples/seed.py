"""The seed example (../shared/seeds/000): grad(minimum(x*y*z*w, b).sum(), x) at a tie.

    python examples/seed.py                                   # the value and the report
    python -m ptnumba_codegen explain examples/seed.py:fn --ir
"""

import pytensor

import ptnumba_codegen
from ptnumba_codegen.tools.demo import seed_graph, seed_values

inputs, gx = seed_graph()
fn = pytensor.function(inputs, gx, mode=ptnumba_codegen.policy_mode("default"))
fn(*seed_values())

if __name__ == "__main__":
    print("policy default:", fn(*seed_values()))  # [404.19741326], stock numba gives [0.]
    print(ptnumba_codegen.explain(fn))
