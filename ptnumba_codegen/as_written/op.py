"""`AsWritten`: an opaque op holding a piece of the graph exactly as the user wrote it.

The as-written pass (`ptnumba_codegen.as_written.freeze`) puts a decision and the cone of its
decision inputs into one `AsWritten` node before PyTensor's rewrites run. No rewrite
looks inside it: it is not an `OpFromGraph` (so no inlining and no inner-graph
rewriting by the mode), it has no scalar op to fuse, and it refuses constant folding
(which would evaluate it with numpy, whose exp/log differ from libm in the last bit).

Its inner graph is a `FrozenFunctionGraph`: immutable, hashable and picklable, so equal
copies merge and the op can be pickled with a compiled function. How it is compiled:

* numba: ``ptnumba_codegen.as_written.lowering`` (the inner graph with IEEE arithmetic
  and libm, bit for bit ``Mode(linker="numba", optimizer=None)`` under
  ``numba__fastmath=False``);
* every other linker: `perform`, which runs the inner graph compiled without rewrites.
"""

from __future__ import annotations

from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FrozenFunctionGraph
from pytensor.graph.op import Op

from ptnumba_codegen.analysis.whole_graph import register_exact_reader
from ptnumba_codegen.policy import Policy

REASON = "as_written"


class AsWritten(Op):
    """A decision and its cone (``kind="decision"``), the cones of some decision inputs of a
    node that stays (``kind="inputs"``), a cone several decisions read (``kind="cone"``), or
    one product of as-written inputs that every reader reads (``kind="shared"``), computed
    as written.

    ``fgraph``, ``policy`` and ``outer_pools`` are its identity (the policy's threads setting
    reaches the inner kernels; ``outer_pools`` names the thread pools the function it is
    part of runs ops on, `ptnumba_codegen.runtime.pools`, so its kernels yield to them as the
    function's other kernels do);
    ``label`` and ``kind`` only describe it.
    """

    __props__ = ("fgraph", "policy", "outer_pools")
    _CACHES = ("_perform_fn", "_lowering", "_flattened", "_inner_shape_template", "_inner_shape_frozen")

    def __init__(
        self,
        fgraph: FrozenFunctionGraph,
        policy: Policy,
        label: str = "",
        kind: str = "decision",
        outer_pools: tuple[str, ...] = (),
    ):
        self.fgraph = fgraph
        self.policy = policy
        self.outer_pools = tuple(outer_pools)
        self.label = label
        self.kind = kind

    # -- description --------------------------------------------------------------------
    @property
    def cone_size(self) -> int:
        """Ops recomputed as written, the decision itself not counted."""
        n = len(self.fgraph.toposort())
        return n - 1 if self.kind == "decision" else n

    def __str__(self):
        return f"AsWritten{{{self.label}, cone={self.cone_size}}}"

    # -- graph ---------------------------------------------------------------------------
    def make_node(self, *inputs):
        if len(inputs) != len(self.fgraph.inputs):
            raise TypeError(f"{self} takes {len(self.fgraph.inputs)} inputs, got {len(inputs)}")
        inputs = [inner.type.filter_variable(x) for inner, x in zip(self.fgraph.inputs, inputs, strict=True)]
        return Apply(self, inputs, [o.type() for o in self.fgraph.outputs])

    def do_constant_folding(self, fgraph, node):
        return False  # folding would run numpy, not libm

    # the shapes of the outputs as a function of the inputs' (same machinery as OpFromGraph)
    infer_shape = OpFromGraph.infer_shape

    def connection_pattern(self, node):
        return [[True] * len(node.outputs) for _ in node.inputs]

    # -- non-numba linkers --------------------------------------------------------------
    def perform(self, node, inputs, outputs):
        fn = getattr(self, "_perform_fn", None)
        if fn is None:
            fn = self._perform_fn = self._compile_python()
        results = fn(*inputs)
        for storage, value in zip(outputs, results, strict=True):
            storage[0] = value

    def _compile_python(self):
        import pytensor
        from pytensor.compile.mode import Mode

        inner = self.fgraph.unfreeze()
        fn = pytensor.function(
            list(inner.inputs),
            list(inner.outputs),
            mode=Mode(linker="vm", optimizer=None),
            on_unused_input="ignore",
            accept_inplace=True,
        )
        fn.trust_input = True
        return fn

    # -- pickling -----------------------------------------------------------------------
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self._CACHES}


register_exact_reader(
    AsWritten,
    "an opaque copy computes decisions from its inputs as written: the kernels that "
    "produce them (a cone put back into the graph, a value the rest computes the same) "
    "must give it their exact values",
)


def is_as_written(op) -> bool:
    return isinstance(op, AsWritten)


class EnvelopeGuarded(AsWritten):
    """Decision targets computed as written only when their float inputs leave a box
    (`ptnumba_codegen.as_written.envelope_guards`): inputs are the inner graph's inputs,
    then ``n_checks`` float inputs checked against ``bounds`` (finite, ``|x| <= bound``),
    then the outputs' shapes, one after the other. Inside the box output k is
    ``outcomes[k]`` everywhere (proven on the graph as written); outside, the inner graph
    computes them.
    """

    __props__ = ("fgraph", "policy", "outer_pools", "bounds", "outcomes", "n_checks")

    def __init__(self, fgraph, policy, bounds, outcomes, n_checks, label="", outer_pools=()):
        super().__init__(fgraph, policy, label=label, kind="guarded", outer_pools=outer_pools)
        self.bounds = tuple(bounds)
        self.outcomes = tuple(bool(o) for o in outcomes)
        self.n_checks = int(n_checks)

    @property
    def n_inner(self) -> int:
        return len(self.fgraph.inputs)

    @property
    def ndims(self) -> tuple[int, ...]:
        return tuple(o.type.ndim for o in self.fgraph.outputs)

    def make_node(self, *inputs):
        import pytensor.tensor as pt

        n = self.n_inner
        inner = [t.type.filter_variable(x) for t, x in zip(self.fgraph.inputs, inputs[:n], strict=True)]
        checks = [pt.as_tensor_variable(x) for x in inputs[n : n + self.n_checks]]
        shape = [pt.as_tensor_variable(s).astype("int64") for s in inputs[n + self.n_checks :]]
        if len(shape) != sum(self.ndims):
            raise TypeError(f"{self} needs {sum(self.ndims)} shape inputs, got {len(shape)}")
        return Apply(self, [*inner, *checks, *shape], [o.type() for o in self.fgraph.outputs])

    def _shapes(self, values) -> list:
        flat, out, k = list(values[self.n_inner + self.n_checks :]), [], 0
        for nd in self.ndims:
            out.append(tuple(flat[k : k + nd]))
            k += nd
        return out

    def infer_shape(self, node, shapes):
        return self._shapes(node.inputs)

    def connection_pattern(self, node):
        return [[True] * len(node.outputs) for _ in node.inputs]

    def inside(self, checks) -> bool:
        """Whether every checked value is finite with ``|x| <= bound``."""
        import numpy as np

        return all(bool(np.all(np.abs(np.asarray(x)) <= b)) for x, b in zip(checks, self.bounds, strict=True))

    def perform(self, node, inputs, outputs):
        import numpy as np

        n, k = self.n_inner, self.n_checks
        if self.inside(inputs[n : n + k]):
            for storage, shape, value, out in zip(outputs, self._shapes(inputs), self.outcomes, node.outputs, strict=True):
                storage[0] = np.full(tuple(int(s) for s in shape), value, dtype=out.type.dtype)
            return
        fn = getattr(self, "_perform_fn", None)
        if fn is None:
            fn = self._perform_fn = self._compile_python()
        for storage, value in zip(outputs, fn(*inputs[:n]), strict=True):
            storage[0] = value

    def __str__(self):
        return f"EnvelopeGuarded{{{len(self.outcomes)} decision(s)}}"
