"""A function's rewritten graph, on disk, keyed by the graph it was given.

A warm process (PyTensor's numba cache filled by an earlier one) loads every kernel from
disk, but still rewrites the whole graph first: PyTensor's rewrites, then the policy's
passes, unless the result is on disk (CHANGELOG.md, "A function's rewritten graph kept on
disk"). The result depends only on

- the graph given to the rewrites: its ops with their properties, types, constants, how
  they connect (`analysis.graph_text`), and which inputs may be overwritten;
- the rewrites that run: every rewrite's name (`analysis.graph_text.rewrites_text`:
  what PyTensor, PyMC or the user registered), and the policy of the generator's passes;
- the code that runs them: the generator's version and source digest, PyTensor's, PyMC's,
  numba's and NumPy's versions; the linker the function is compiled for; every PyTensor
  config flag but ``mode`` (set to the compiling mode itself while rewriting);

and on what the passes read from the process (`PROCESS_FACTS`: the thread pools split loops
yield to), which is checked after a hit instead (it may change while the passes run).

`CachedRewriteSequence` is the class of every rewrite sequence PyTensor's ``optdb``
builds (`modes.py` sets it). A sequence that does not run a policy pass (`POLICY_PASSES`:
the kernels' pass, and those a higher layer registers with `register_policy_pass`, the
as-written pass among them) is PyTensor's own, unchanged. One that does spells all of the
above; on a hit it puts the stored graph in place of the given one's outputs (same inputs,
validated by the graph's features as any replacement is) and skips the rewrites, on a miss
it rewrites and stores the result. What the passes leave on the graph besides its nodes
(`CARRIED_ATTRIBUTES`) is stored and restored with it, and what they set up in the process
(`policy_codegen.prepare_process`) runs on a hit too. What they log at INFO (each pass's
summary) is kept with the graph and logged again on a hit; a graph stored by a process
that did not log at INFO is rewritten again by one that does (its summaries are not known).

Nothing is kept, and every rewrite runs as before, when:

- ``PTNUMBA_CODEGEN_REWRITTEN_GRAPHS=off`` (``on``, the default, keeps; read at each
  compile: `settings.REWRITTEN_GRAPHS`);
- PyTensor's numba cache is off (`runtime.disk_cache`: the files live beside it);
- the graph cannot be spelled completely (`NoKey`);
- PyTensor is profiling the rewrites (``profile``, ``profile_optimizer``: a profile of
  skipped rewrites would be empty);
- a pass recorded an error (`pass_errors`: its warning and ``explain``'s account are
  given again by rewriting again);
- the result cannot be pickled.

The generator's code is in the key by its source digest, not by what a process changes in
it at run time (a row patched into a rule table): such a process sets
``PTNUMBA_CODEGEN_REWRITTEN_GRAPHS=off`` (the test suite does it for every test that patches).

Each record holds its full key text, compared on read (a digest collision is a miss); a
damaged or unreadable file is a miss. Bits are unchanged: the graph put in place is the
one the rewrites produced for the same key, and the kernels compiled from it the same.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import pickle
import sys
from collections.abc import Mapping

import numba
import numpy
import pytensor
from pytensor import config
from pytensor.compile.builders import OpFromGraph
from pytensor.configparser import config_files_from_pytensorrc
from pytensor.graph.basic import clone_get_equiv
from pytensor.graph.fg import Output
from pytensor.graph.rewriting.basic import SequentialGraphRewriter
from pytensor.graph.traversal import io_toposort

from ptnumba_codegen import _version
from ptnumba_codegen.analysis.graph_text import NoKey, graph_text, rewrites_text
from ptnumba_codegen.passes import pass_errors
from ptnumba_codegen.passes.policy_codegen import PolicyCodegen, prepare_process
from ptnumba_codegen.policy import PolicyError, load_policy
from ptnumba_codegen.runtime import collector, disk_cache, pools
from ptnumba_codegen.settings import REWRITTEN_GRAPHS

log = logging.getLogger("ptnumba_codegen")

CACHE = disk_cache.REWRITTEN_GRAPHS
# The passes whose sequences are kept: the kernels' pass, and those a higher layer
# registers (`register_policy_pass`: the as-written pass, `as_written.freeze`).
POLICY_PASSES: list[type] = [PolicyCodegen]
# What the policy's passes leave on the function graph besides its nodes, with its reader
# (registered with the pass that leaves it).
CARRIED_ATTRIBUTES: dict[str, str] = {}


def register_policy_pass(pass_class: type, carried: Mapping[str, str] | None = None) -> None:
    """Keep the sequences that run ``pass_class`` too, with the attributes it leaves on the
    function graph (``carried``: attribute -> who reads it)."""
    if pass_class not in POLICY_PASSES:
        POLICY_PASSES.append(pass_class)
    CARRIED_ATTRIBUTES.update(carried or {})


def _is_policy_pass(r) -> bool:
    return isinstance(r, tuple(POLICY_PASSES))


# Config flags not in the key: ``mode`` is the compiling Mode object while rewriting
# (its linker is in the key as ``linker``).
CONFIG_NOT_IN_KEY = frozenset({"mode"})


def _yields(sequence, fgraph) -> str:
    """The pools each kernel pass's loops yield to, read as `PolicyCodegen.apply` reads them."""
    return repr([pools.pools_to_yield_to(fgraph, r.outer_pools) if load_policy(r.policy).parallel.enabled else ()
                 for r in sequence.data if isinstance(r, PolicyCodegen)])


# What the passes read from the process (not from the graph, the policy or the config): it
# can change while they run (starting the thread runtime shares OpenBLAS's pool), so it is
# not in the key. It is stored with the graph as the passes saw it, read again after a hit
# has set the process up as the passes would, and a difference is a miss.
PROCESS_FACTS = {
    "pools": (_yields,
              "policy_codegen: a function with ops on a pool with threads of its own (OpenBLAS, "
              "unless shared or limited to one thread) never splits its loops (runtime.pools)"),
}

# What an op builds on demand and keeps, holding local functions that do not pickle: stored
# empty (built again on demand after loading), with the attribute's empty value and why.
BUILT_ON_DEMAND = {
    OpFromGraph: ({"_lop_op_cache": dict, "_rop_op_cache": lambda: None},
                  "its gradient's pullback and pushforward, closures built when a gradient is taken"),
}


class _GraphPickler(pickle.Pickler):
    """The pickler of stored graphs: an op's caches (`BUILT_ON_DEMAND`) stored empty."""

    def reducer_override(self, obj):
        for cls, (empty, _) in BUILT_ON_DEMAND.items():
            if isinstance(obj, cls) and any(getattr(obj, a, None) for a in empty):
                stored = copy.copy(obj)
                for attribute, make in empty.items():
                    setattr(stored, attribute, make())
                return stored.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _dumps(record) -> bytes:
    buffer = io.BytesIO()
    _GraphPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(record)
    return buffer.getvalue()


STATS = {"hits": 0, "stored": 0}  # this process's, for tests and the compile breakdown


def _versions() -> str:
    pymc = sys.modules.get("pymc")
    return (f"generator {_version.GENERATOR_VERSION}:{_version.GENERATOR_DIGEST} pytensor {pytensor.__version__} "
            f"numba {numba.__version__} numpy {numpy.__version__} "
            f"pymc {getattr(pymc, '__version__', None)}")


def _config_text() -> str:
    """Every config flag's value; a flag whose default is computed on first read (BLAS
    detection, the C++ compiler) and not read yet is spelled ``unread`` (reading it here
    would cost a warm compile what the rewrites may never ask for): what sets it then is
    in the key instead, ``PYTENSOR_FLAGS`` and the ``.pytensorrc`` files."""
    lines = [f"env PYTENSOR_FLAGS={os.environ.get('PYTENSOR_FLAGS')!r}"]
    lines += [f"rc {rc} {disk_cache.file_digest(str(rc))}" for rc in config_files_from_pytensorrc()]
    for name in sorted(n for n in config._config_var_dict if n not in CONFIG_NOT_IN_KEY):
        param = config._config_var_dict[name]
        value = param.val if hasattr(param, "val") else "unread"
        lines.append(f"config {name}={value!s}")
    return "\n".join(lines)


def _is_extra(r) -> bool:
    """A rewrite a Mode added itself (``Mode.register``; `modes.policy_mode` adds the policy's
    passes so): optdb names it by its class and ``id``, which differ between processes."""
    return getattr(r, "name", None) == f"{r.__class__}_{id(r)}"


def _spelled(r) -> str:
    """A rewrite of the sequence by its registered name; one a Mode added itself by its
    class, and a policy pass with its policy's name and digest too."""
    name = f"{type(r).__module__}.{type(r).__qualname__}" if _is_extra(r) else getattr(r, "name", None)
    if _is_policy_pass(r):
        policy = load_policy(r.policy)
        name += (f" policy={policy.name}:{policy.digest} kinds={getattr(r, 'kinds', None)} "
                 f"pools={getattr(r, 'outer_pools', None)}")
    return name or type(r).__qualname__


def graph_key(sequence: CachedRewriteSequence, fgraph) -> str | None:
    """The full text the rewritten graph is stored under, or None (nothing kept)."""
    if REWRITTEN_GRAPHS.value() == "off" or config.profile or config.profile_optimizer or getattr(fgraph, "profile", None):
        return None
    if CACHE.directory() is None:
        return None
    outputs = list(fgraph.outputs)
    supervisor = getattr(fgraph, "_supervisor", None)
    protected = set() if supervisor is None else set(supervisor.protected)
    mode = getattr(fgraph, "_compile_mode", None)
    linker = None if mode is None else type(mode.linker)
    try:
        text = graph_text(fgraph.inputs, outputs)
        return "\n".join([
            f"format {CACHE.format}",
            _versions(),
            f"linker {None if linker is None else f'{linker.__module__}.{linker.__qualname__}'}",
            "protected " + ",".join(str(k) for k, v in enumerate(fgraph.inputs) if v in protected),
            "features " + ",".join(sorted(type(f).__qualname__ for f in fgraph._features)),
            "sequence " + "\n".join(map(_spelled, sequence.data)),
            rewrites_text(tuple(r for r in sequence.data if not _is_extra(r) and not _is_policy_pass(r))),
            _config_text(),
            text,
        ])
    except (NoKey, PolicyError):
        return None
    except Exception as err:  # noqa: BLE001  a graph it cannot spell is rewritten, never a failed compile
        log.debug("ptnumba_codegen: no key for the rewritten graph (%s: %s)", type(err).__name__, err)
        return None


def load(key: str):
    """The record stored under ``key`` (None: a miss)."""
    return CACHE.load(CACHE.directory(), disk_cache.digest(key), {"text": key})


def _any_pass_error(fgraph, depth: int = 0) -> bool:
    """Whether a pass recorded an error on ``fgraph`` or an inner graph of its ops."""
    if pass_errors.graph_errors(fgraph):
        return True
    return depth < 8 and any(
        _any_pass_error(inner, depth + 1)
        for node in fgraph.apply_nodes
        if (inner := getattr(node.op, "fgraph", None)) is not None and hasattr(inner, "apply_nodes")
    )


def process_facts(sequence, fgraph) -> dict:
    return {name: read(sequence, fgraph) for name, (read, _) in PROCESS_FACTS.items()}


class _Summaries(logging.Handler):
    """What the passes log at INFO while they run (None: the process does not log at INFO,
    so they computed none)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = [] if log.isEnabledFor(logging.INFO) else None

    def emit(self, record):
        if self.messages is not None:
            self.messages.append((record.levelno, record.name, record.getMessage()))

    def __enter__(self):
        log.addHandler(self)
        return self

    def __exit__(self, *exc):
        log.removeHandler(self)


def store(key: str, fgraph, sequence, messages) -> bytes | None:
    """Keep ``fgraph``'s rewritten graph under ``key`` (its inputs as placeholders: a shared
    variable's value is not stored) with what the passes logged (`_Summaries`). The record
    kept, or None when nothing was."""
    directory = CACHE.directory()
    if directory is None or _any_pass_error(fgraph):
        return None
    try:
        placeholders = [v.type() for v in fgraph.inputs]
        equiv = clone_get_equiv(fgraph.inputs, fgraph.outputs, copy_inputs=False, copy_orphans=False,
                                memo=dict(zip(fgraph.inputs, placeholders, strict=True)))
        graph = (placeholders, [equiv[o] for o in fgraph.outputs])
        carried = {a: getattr(fgraph, a) for a in CARRIED_ATTRIBUTES if hasattr(fgraph, a)}
        data = _dumps(CACHE.record({"text": key}, graph=graph, carried=carried,
                                   facts=process_facts(sequence, fgraph), messages=messages))
    except Exception as err:  # noqa: BLE001  an op that does not pickle: rewritten every time
        log.debug("ptnumba_codegen: rewritten graph not kept (%s: %s)", type(err).__name__, err)
        return None
    if CACHE.write(directory, disk_cache.digest(key), data):
        STATS["stored"] += 1
        return data
    return None


def install(fgraph, record, sequence) -> bool:
    """Put the stored graph in place of ``fgraph``'s outputs and set the process up as the
    passes would (`policy_codegen.prepare_process`); False (``fgraph`` unchanged) when it
    does not fit or the process reads other facts (`PROCESS_FACTS`) than the passes did."""
    if log.isEnabledFor(logging.INFO) and record.get("messages") is None:
        return False  # stored by a process that did not log the passes' summaries
    placeholders, outputs = record["graph"]
    if len(placeholders) != len(fgraph.inputs) or len(outputs) != len(fgraph.outputs):
        return False
    if any(p.type != v.type for p, v in zip(placeholders, fgraph.inputs, strict=True)):
        return False
    to_input = dict(zip(placeholders, fgraph.inputs, strict=True))
    for node in io_toposort(placeholders, outputs):  # fresh objects of this load: rewire them
        node.inputs = [to_input.get(v, v) for v in node.inputs]
    new_outputs = [to_input.get(v, v) for v in outputs]
    output_nodes = {}
    for k, out in enumerate(fgraph.outputs):
        for client, _ in fgraph.clients[out]:
            if isinstance(client.op, Output) and client.op.idx == k:
                output_nodes[k] = client
    if len(output_nodes) != len(fgraph.outputs) or not hasattr(fgraph, "checkpoint"):
        return False
    checkpoint = fgraph.checkpoint()
    try:
        for k, new in enumerate(new_outputs):
            fgraph.change_node_input(output_nodes[k], 0, new, reason="rewritten_graphs", import_missing=True)
        fgraph.validate()
        if any(isinstance(r, PolicyCodegen) for r in sequence.data):
            prepare_process(fgraph)
        facts = process_facts(sequence, fgraph)
        if facts != record.get("facts"):
            raise LookupError(f"the process reads {facts}, the passes read {record.get('facts')}")
    except Exception as err:  # noqa: BLE001  rewritten as usual
        fgraph.revert(checkpoint)
        log.debug("ptnumba_codegen: stored rewritten graph not used (%s: %s)", type(err).__name__, err)
        return False
    for attribute, value in record.get("carried", {}).items():
        setattr(fgraph, attribute, value)
    return True


def replay(record) -> None:
    """Log what the passes logged when ``record``'s graph was rewritten."""
    for level, name, message in record.get("messages") or ():
        logging.getLogger(name).log(level, "%s", message)


class CachedRewriteSequence(SequentialGraphRewriter):
    """PyTensor's rewrite sequence; one that runs a policy pass keeps its result on disk."""

    def apply(self, fgraph, *args, **kwargs):
        if not any(_is_policy_pass(r) for r in self.data):
            return super().apply(fgraph, *args, **kwargs)
        collector.configure()
        with collector.postponed_while():
            result = self._apply_policy_sequence(fgraph, *args, **kwargs)
            collector.hold_for(fgraph)  # until its funcify (`node_wrappers.funcify_node`)
            return result

    def _apply_policy_sequence(self, fgraph, *args, **kwargs):
        key = graph_key(self, fgraph)
        if key is not None:
            record = load(key)
            if record is not None and install(fgraph, record, self):
                STATS["hits"] += 1
                replay(record)
                return None
        with _Summaries() as summaries:
            result = super().apply(fgraph, *args, **kwargs)
        data = None if key is None else store(key, fgraph, self, summaries.messages)
        if data is not None:
            # Compile what a later process will read, as it will read it: the numba linker
            # names the whole function by its nodes in `toposort` order, which follows how
            # the graph was built (the inplace orderings), so a rewritten graph and its
            # stored copy could compile to two keys (a warm process recompiling the whole
            # function once).
            install(fgraph, pickle.loads(data), self)
        return result


__all__ = ["CACHE", "CARRIED_ATTRIBUTES", "POLICY_PASSES", "STATS", "CachedRewriteSequence",
           "graph_key", "install", "load", "register_policy_pass", "store"]
