"""Where a GPU would run each op of a traced function, read from TensorFlow's own kernel table
on any machine.

TensorFlow places an op on the GPU only when a GPU kernel is registered for its types; with
none, the op runs on the CPU and its inputs are copied to the host, which waits for the GPU to
produce them. A GPU kernel may also declare arguments ``HostMemory``: most int32 kernels do
(``Less``, ``Greater``, ``Equal`` on int32 read and write host memory; ``Range`` and ``Fill`` of
int32 are host kernels), so an int32 tensor of a batch's size that passes through one is copied
to the host and back. A CPU build of TensorFlow registers the GPU kernels too
(``kernels.get_registered_kernels_for_op``), so both show in a step traced on a CPU with a GPU
standing in (``common.runtime.devices.standing_in``).

``findings`` reads a traced function and every function it calls: for each op outside a
function that XLA compiles whole (``jit_compile``: XLA places its own computation), a GPU or
``DEFAULT`` kernel must match its types, and no tensor larger than shape arithmetic (a scalar,
or a vector of at most ``SHAPE_ELEMENTS`` elements) may pass through a ``HostMemory`` argument.
Handles (resources, variants) live in host memory by design and are not counted.
"""
from __future__ import annotations

import dataclasses
import functools

import tensorflow as tf
from tensorflow.python.framework import kernels

SHAPE_ELEMENTS = 16  # the most elements of shape arithmetic: a rank-8 tensor's paddings
_HANDLES = (tf.resource, tf.variant, tf.string)


@dataclasses.dataclass(frozen=True)
class Finding:
    function: str  # the traced function's name, as TensorFlow names it
    op: str  # the op's name in that function
    problem: str  # "no GPU kernel for Range(Tidx=int32)", "HostMemory input x: int32[16,8]"

    def __str__(self) -> str:
        return f"{self.op} ({self.function}): {self.problem}"


@functools.cache
def _gpu_kernels(op_type: str) -> tuple:
    """((constraints {attr: allowed values}, HostMemory argument names), ...) of the GPU
    kernels of ``op_type``, then its DEFAULT ones (which TensorFlow takes when no GPU kernel
    matches). An allowed value is a type, or a string for a string attribute (GatherNd's
    ``bad_indices_policy``)."""
    out = {"GPU": [], "DEFAULT": []}
    for k in kernels.get_registered_kernels_for_op(op_type).kernel:
        if k.device_type in out:
            constraints = {c.name: frozenset(c.allowed_values.list.type or
                                             c.allowed_values.list.s)
                           for c in k.constraint}
            out[k.device_type].append((constraints, frozenset(k.host_memory_arg)))
    return tuple(out["GPU"] + out["DEFAULT"])


def _attr_values(op, name: str) -> list:
    """The op's values of attribute ``name``: its types, or its string (the op definition's
    default when the node does not set it)."""
    if name in op.node_def.attr:
        value = op.node_def.attr[name]
    else:
        value = next((a.default_value for a in op.op_def.attr if a.name == name), None)
        if value is None:
            return []
    if value.HasField("list"):
        return list(value.list.type)
    return [value.type] if value.HasField("type") else [value.s]


def _kernel(op):
    """The HostMemory argument names of the kernel a GPU would run ``op`` with, or None when
    no GPU kernel matches its attributes."""
    for constraints, host in _gpu_kernels(op.type):
        if all(set(_attr_values(op, name)) <= allowed for name, allowed in constraints.items()):
            return host
    return None


def _arguments(op, args, tensors) -> dict[str, list]:
    """{argument name: its tensors} of an op's inputs or outputs (``op_def`` order)."""
    out, i = {}, 0
    for arg in args:
        if arg.number_attr:
            n = op.get_attr(arg.number_attr)
        elif arg.type_list_attr:
            n = len(op.get_attr(arg.type_list_attr))
        else:
            n = 1
        out[arg.name] = list(tensors[i:i + n])
        i += n
    return out


# Ops whose outputs are shapes or axes, at most a rank long: shape arithmetic whatever their size
# reads statically (BroadcastGradientArgs' reduction axes have no static length).
_SHAPE_OPS = frozenset({"Shape", "ShapeN", "BroadcastGradientArgs", "BroadcastArgs", "Rank",
                        "Size"})


def _large(tensor) -> bool:
    if tensor.op.type in _SHAPE_OPS:
        return False
    n = tensor.shape.num_elements()
    return n is None or n > SHAPE_ELEMENTS


def _describe(tensor) -> str:
    dims = ",".join("?" if d is None else str(d) for d in tensor.shape.as_list()) \
        if tensor.shape.rank is not None else "..."
    return f"{tensor.dtype.name}[{dims}]"


def _called(op) -> list[str]:
    """Names of the functions an op calls (a call, a cond's branches, a loop's body)."""
    names = []
    for value in op.node_def.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        elif value.HasField("list"):
            names += [f.name for f in value.list.func]
    return names


def _check_op(op, function: str) -> list[Finding]:
    host = _kernel(op)
    if host is None:
        types = ", ".join(f"{name}={'/'.join(tf.as_dtype(t).name for t in _attr_values(op, name))}"
                          for name in sorted(op.node_def.attr) if _is_type_attr(op, name))
        return [Finding(function, op.name, f"no GPU kernel for {op.type}({types})")]
    found = []
    for kind, args, tensors in (("input", op.op_def.input_arg, op.inputs),
                                ("output", op.op_def.output_arg, op.outputs)):
        for name, ts in _arguments(op, args, tensors).items():
            if name in host:
                found += [Finding(function, op.name,
                                  f"{op.type}'s HostMemory {kind} {name}: {_describe(t)}")
                          for t in ts if t.dtype not in _HANDLES and _large(t)]
    return found


def _is_type_attr(op, name: str) -> bool:
    value = op.node_def.attr[name]
    return value.HasField("type") or (value.HasField("list") and len(value.list.type) > 0)


def findings(concrete) -> list[Finding]:
    """What a GPU would run on the host in ``concrete`` (a ``ConcreteFunction``) and in every
    function it calls, except inside functions that XLA compiles whole."""
    out, seen = [], set()
    functions = {}

    def collect(graph):
        for name, fn in getattr(graph, "_functions", {}).items():
            functions.setdefault(name, fn)

    def walk(graph, name: str, compiled: bool):
        collect(graph)
        outputs = {id(t) for t in getattr(graph, "outputs", [])}
        for op in graph.get_operations():
            for called in _called(op):
                fn = functions.get(called)
                if fn is None:
                    raise KeyError(f"{op.name} calls {called}, which is not in the trace")
                xla = compiled or _must_compile(op) or _must_compile(fn)
                if (called, xla) not in seen:
                    seen.add((called, xla))
                    walk(fn.graph, called, xla)
            if not compiled and not _must_compile(op) and not _dead(op, outputs):
                out.extend(_check_op(op, name))

    attrs = concrete.function_def.attr
    walk(concrete.graph, concrete.function_def.signature.name,
         "_XlaMustCompile" in attrs and attrs["_XlaMustCompile"].b)
    return out


def _dead(op, graph_outputs: set) -> bool:
    """A stateless op whose outputs nothing reads (a gradient of an integer input, say):
    TensorFlow prunes it before it runs."""
    return (bool(op.outputs) and not op._is_stateful  # noqa: SLF001
            and not any(t.consumers() or id(t) in graph_outputs for t in op.outputs))


def _must_compile(op_or_function) -> bool:
    attrs = (op_or_function.node_def.attr if hasattr(op_or_function, "node_def")
             else op_or_function.definition.attr)
    return "_XlaMustCompile" in attrs and attrs["_XlaMustCompile"].b
