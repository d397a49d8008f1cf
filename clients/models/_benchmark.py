"""The function the client checks and benchmark compile: logp and its gradient at one
raveled point, as PyMC's samplers see them.

``build_logp_fn(model, ip, *, mode, with_grad)`` has the signature of the model
catalogue's recipe, so ``python -m ptnumba_codegen bench --group catalogue --catalogue
clients`` runs these models as it runs the catalogue's. The steps are PyMC's own for its
samplers' function (``Model.logp_dlogp_function``): the logp graph, ``rewrite_pregrad``,
the gradient joined into one vector, the value variables replaced by one raveled input
(``join_nonshared_inputs``), compiled by ``pymc.pytensorf.compile`` in ``mode``.
"""

import pytensor.tensor as pt
from pytensor.tensor import as_tensor
from pymc.blocking import DictToArrayBijection
from pymc.pytensorf import compile as pymc_compile
from pymc.pytensorf import join_nonshared_inputs, rewrite_pregrad


def build_logp_fn(model, ip, *, mode="NUMBA", with_grad=True):
    """``(fn, x)``: ``fn(x)`` returns ``[logp, dlogp]`` (``[logp]`` without the gradient)
    at the raveled point ``x`` of ``ip``; ``fn.trust_input`` is set."""
    value_vars = model.value_vars
    logp = rewrite_pregrad(model.logp())
    outputs = [logp]
    if with_grad:
        # pymc-marketing's variables are xtensors (named dims): their gradients are converted
        # to plain tensors before ravelling, as PyMC's ValueGradFunction does
        grads = pt.grad(logp, value_vars)
        outputs.append(pt.join(0, *(as_tensor(g, allow_xtensor_conversion=True).ravel() for g in grads)))
    outputs, joined = join_nonshared_inputs(point=ip, outputs=outputs, inputs=value_vars)
    fn = pymc_compile([joined], outputs, mode=mode)
    fn.trust_input = True
    x = DictToArrayBijection.map({v.name: ip[v.name] for v in value_vars}).data
    return fn, x
