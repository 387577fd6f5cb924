"""``--profile START:STOP``: a TensorFlow profiler trace of those steps, and a short report of
where their time went.

The trace goes where TensorBoard's profile plugin (installed by install_deps) finds it:
``<results_dir>/tensorboard/plugins/profile/<run>/<host>.xplane.pb`` (``tensorboard --logdir
<results_dir>/tensorboard``, Profile tab). The report, printed and logged, gives:

* ``matmul_conv_share``: the share of op time in matrix multiplications and convolutions
  (MatMul, BatchMatMul, Einsum, Conv2D and their gradients, fused or not);
* ``matmul_conv_16bit_share``: of that time, the share computed in a 16-bit type (bfloat16 or
  float16); the rest is float32;
* on a CPU, ``top_op_types``: the op types that took the most op time, with their shares;
* on a GPU, ``tensor_core_share``: the share of the matmul and convolution kernels' time in
  tensor-core kernels, told by their names as NVIDIA's profiling guidance describes them
  (``h884``/``s884`` on Volta, ``1688``/``16816``/``xmma``/``hmma`` on Turing and Ampere,
  ``gmma``/``wgmma`` on Hopper, CUTLASS ``tensorop``).

On a CPU the ops are timed on the host, and each op's type comes from the graph TensorFlow ran
(its ``T`` attribute), found by the op's name in the trace.
"""
from __future__ import annotations

import glob
import os
import re

import tensorflow as tf

from common.errors import UsageError
from common.tools import op_table
from common.tools.op_table import dtype_of

# An op's event in the host trace: "<node name>:<op type>" (wrappers such as
# "ExecutorState::Process" have "::" and no node name).
_OP_EVENT = re.compile(r"^([^:]+):([A-Za-z_][A-Za-z0-9_]*)$")
_MATMUL_CONV_OP = re.compile(r"(MatMul|Conv[23]D|Einsum|DepthwiseConv)")
# cuDNN and cuBLAS kernels (not Eigen's "TensorConversionOp", a cast).
_MATMUL_CONV_KERNEL = re.compile(r"(gemm|convolve|conv2d|conv_|fprop|dgrad|wgrad|xmma|cutlass|"
                                 r"gmma|winograd)", re.I)
_GPU_16BIT = re.compile(r"(bf16|f16|fp16|half|h884|h1688|h16816|hmma|bfloat16)", re.I)
TOP_OPS = 8  # op types the CPU report names, by their share of op time
TENSOR_CORE = re.compile(r"(884|1688|16816|xmma|hmma|gmma|tensorop|imma|_tc_)", re.I)


def parse_range(spec: str | None) -> tuple[int, int] | None:
    """``"START:STOP"`` -> (START, STOP), steps counted from 1, both included."""
    if not spec:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", spec)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(f"--profile {spec}: give START:STOP, steps with 1 <= START <= STOP "
                         "(for example 20:30)")
    return int(m.group(1)), int(m.group(2))


class StepProfiler:
    """Starts the profiler before step START and stops it after step STOP (or at the end of a
    shorter run), then reports. Inert without ``--profile``."""

    def __init__(self, spec: str | None, logdir: str, log, enabled: bool = True):
        self.range = parse_range(spec) if enabled else None
        self.logdir, self.log = logdir, log
        self.active = False
        self.report: dict = {}

    def plan(self, first: int, last: int) -> None:
        """The loop runs steps ``first``..``last``: a range after its end is said (and
        dropped), one that reaches past it is said to end with the run."""
        if not self.range or self.active or self.report:
            return
        if self.range[0] > last:
            self.log.print(f"profile: steps {self.range[0]}:{self.range[1]} come after this "
                           f"run's last step, {last}: nothing is profiled; give --profile a "
                           "range inside the run")
            self.range = None
        elif self.range[1] > last >= max(self.range[0], first):
            self.log.print(f"profile: the run ends at step {last}: steps "
                           f"{max(self.range[0], first)}:{last} are profiled")

    def starts_after(self, step: int) -> bool:
        return bool(self.range) and not (self.active or self.report) and step == self.range[0] - 1

    def stops_at(self, step: int) -> bool:
        return self.active and step >= self.range[1]

    def before(self, step: int) -> None:
        if not self.range or self.active or self.report:
            return
        if step > self.range[1]:  # a resumed run starts past the range: say so, profile nothing
            self.log.print(f"profile: steps {self.range[0]}:{self.range[1]} come before this "
                           f"run's first step, {step} (it resumes a run): nothing is profiled; "
                           "give --profile a range after it")
            self.range = None
        elif step >= self.range[0]:
            tf.profiler.experimental.start(self.logdir)
            self.active, self.first = True, step

    def after(self, step: int, fn=None, args: tuple = (), final: bool = False) -> None:
        """Call after the device has finished ``step`` (a sync point). ``fn(*args)`` is the
        step just run: a ``tf.function``'s graph gives the ops' types on a CPU."""
        if self.active and (step >= self.range[1] or final):
            tf.profiler.experimental.stop()
            self.active = False
            graphs = ([fn.get_concrete_function(*args).graph]
                      if hasattr(fn, "get_concrete_function") else [])
            steps, trace = step - self.first + 1, latest_trace(self.logdir)
            dtypes = graph_dtypes(graphs)
            self.report = {"profiled_steps": steps,
                           "profiled_step_range": f"{self.first}:{step}",
                           **summarize(trace, dtypes)}
            # The per-op table next to the trace (python -m benchtools.profile_diff reads it).
            rows = op_table.from_trace(
                trace, steps, dtypes, TENSOR_CORE.search,
                host_op_us=None if "tensor_core_share" in self.report
                else self.report["op_seconds"] * 1e6)
            self.report["op_table"] = os.path.join(os.path.dirname(trace), op_table.FILE)
            op_table.write(rows, self.report["op_table"])
            self.report["op_table_rows"] = len(rows)  # profile_diff tells a table cut short
            missed = op_table.missed_tensor_cores(rows)
            if missed:
                self.report["tensor_core_missed"] = missed
            self.log.print(f"profile of steps {self.first}:{step}: " + describe(self.report)
                           + f" (trace in {self.logdir}, per-op table "
                           f"{self.report['op_table']})")

    def close(self) -> None:
        """Stops a trace a failing run left running (no report)."""
        if self.active:
            tf.profiler.experimental.stop(save=False)
            self.active = False


def latest_trace(logdir: str) -> str:
    traces = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    if not traces:
        raise RuntimeError(f"the profiler wrote no trace under {logdir}")
    return max(traces, key=os.path.getmtime)


def _xspace(path: str):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def describe(report: dict) -> str:
    parts = [f"{report['profiled_steps']} step(s)",
             f"matmul/conv {report['matmul_conv_share']:.0%} of op time"]
    if report.get("matmul_conv_share"):
        parts.append(f"of which {report['matmul_conv_16bit_share']:.0%} in 16-bit types")
    if "tensor_core_share" in report:
        parts.append(f"{report['tensor_core_share']:.0%} of matmul/conv kernel time on tensor "
                     "cores")
    if "top_op_types" in report:
        parts.append(f"most time in: {report['top_op_types']}")
    if "tensor_core_missed" in report:
        parts.append("tensor-core eligible but ran other kernels: "
                     f"{report['tensor_core_missed']}")
    return ", ".join(parts)


def graph_dtypes(graphs) -> dict[str, str]:
    """Node name -> the type it computes in (its ``T`` or ``dtype``; a cast's
    ``SrcT->DstT``), over ``graphs`` and every function they call."""
    out: dict[str, str] = {}

    def name(node, key):
        return tf.dtypes.as_dtype(node.attr[key].type).name

    def add(nodes):
        for node in nodes:
            if "SrcT" in node.attr and "DstT" in node.attr:
                out.setdefault(node.name, f"{name(node, 'SrcT')}->{name(node, 'DstT')}")
                continue
            for key in ("T", "dtype"):
                if key in node.attr and node.attr[key].type:
                    out.setdefault(node.name, name(node, key))
                    break

    for graph in graphs:
        graph_def = graph.as_graph_def()
        add(graph_def.node)
        for function in graph_def.library.function:
            add(function.node_def)
    return out


def summarize(path: str, dtypes: dict[str, str] | None = None) -> dict:
    """The report's shares from the trace at ``path``: GPU kernels where there are GPUs, else
    the host's ops, typed by ``dtypes`` (``graph_dtypes``)."""
    space = _xspace(path)
    gpus = [p for p in space.planes if p.name.startswith("/device:GPU")]
    total = matmul_conv = sixteen = tensor_core = unknown = 0
    by_type: dict[str, int] = {}
    if gpus:
        for plane in gpus:
            for line in plane.lines:
                for event in line.events:
                    kernel = plane.event_metadata[event.metadata_id].name
                    total += event.duration_ps
                    if _MATMUL_CONV_KERNEL.search(kernel):
                        matmul_conv += event.duration_ps
                        sixteen += event.duration_ps * bool(_GPU_16BIT.search(kernel))
                        tensor_core += event.duration_ps * bool(TENSOR_CORE.search(kernel))
    else:
        dtypes = dtypes or {}
        for plane in space.planes:
            if plane.name != "/host:CPU":
                continue
            for line in plane.lines:
                for event in line.events:
                    m = _OP_EVENT.match(plane.event_metadata[event.metadata_id].name)
                    if not m:
                        continue
                    total += event.duration_ps
                    by_type[m.group(2)] = by_type.get(m.group(2), 0) + event.duration_ps
                    if _MATMUL_CONV_OP.search(m.group(2)):
                        matmul_conv += event.duration_ps
                        dtype = dtype_of(m.group(1), dtypes)
                        sixteen += event.duration_ps * (dtype in ("bfloat16", "float16"))
                        unknown += event.duration_ps * (dtype is None)
    report = {"op_seconds": total / 1e12,
              "matmul_conv_share": matmul_conv / total if total else 0.0,
              "matmul_conv_16bit_share": sixteen / matmul_conv if matmul_conv else 0.0}
    if gpus:
        report["tensor_core_share"] = tensor_core / matmul_conv if matmul_conv else 0.0
    elif unknown:
        report["matmul_conv_untyped_share"] = unknown / matmul_conv
    if by_type and total:
        top = sorted(by_type.items(), key=lambda kv: -kv[1])[:TOP_OPS]
        report["top_op_types"] = ", ".join(f"{name} {ps / total:.0%}" for name, ps in top)
    return report
