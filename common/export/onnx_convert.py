"""``--export_onnx``: the exported SavedModel's signatures that take tensors (``preprocessed``
for the image models) as ONNX (``model.onnx`` beside it), converted by tf2onnx, the input of
TensorRT's ``trtexec`` and of ONNX Runtime.

tf2onnx runs in a process of its own (its command line, ``python -m tf2onnx.convert``): it
rewrites TensorFlow graphs with process-wide settings that a training process should not
carry, and its many lines of output go to a log of its own, kept (and named) only when it fails.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence

from common.errors import TrainingError, UsageError, one_line

OPSET = 17  # TensorRT 8.6 and later, ONNX Runtime 1.14 and later


def require() -> None:
    """One line at start-up when tf2onnx is missing (not after a whole training run)."""
    missing = [m for m in ("tf2onnx", "onnx") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"--export_onnx needs {' and '.join(missing)}: run "
                         "'bash scripts/install_deps.sh' (or pip install tf2onnx onnx)")


def export(saved_model: str, out_path: str | None = None, signature: str = "serving_default",
           opset: int = OPSET, log_dir: str | None = None) -> str:
    """``saved_model``'s ``signature`` as ONNX at ``out_path`` (default: model.onnx in it);
    tf2onnx's log kept in ``log_dir`` when it fails."""
    out_path = out_path or os.path.join(saved_model, "model.onnx")
    cmd = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", saved_model,
           "--signature_def", signature, "--opset", str(opset), "--output", out_path]
    failed = run_with_log(cmd, "tf2onnx-", out_path, log_dir=log_dir)
    if failed:
        raise RuntimeError(f"tf2onnx could not convert {saved_model} {failed}")
    name_batch_dimension(out_path, signature)
    return out_path


def name_batch_dimension(path: str, signature: str = "serving_default") -> None:
    """The leading dimension of the graph's inputs and outputs named ``batch`` where tf2onnx
    left a name such as ``unk__619`` (what trtexec, Netron and Triton's tools show), in every
    tensor that carries it; the graph's description without the path of the folder it was
    converted from (tf2onnx writes the export's staging folder there, a host path that every
    copy of the file carried)."""
    import onnx
    model = onnx.load(path)
    graph = model.graph
    renamed = {}
    for value in (*graph.input, *graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_param and not dims[0].HasField("dim_value"):
            renamed[dims[0].dim_param] = "batch"
    for value in (*graph.input, *graph.output, *graph.value_info):
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param in renamed:
                d.dim_param = renamed[d.dim_param]
    graph.doc_string = f"the SavedModel's {signature} signature, converted by tf2onnx"
    onnx.save(model, path)


def export_module(module, export_dir: str) -> list[str]:
    """The ``ExportModule``'s ONNX files (``ExportSpec.onnx_files``) in ``export_dir`` (which
    holds its SavedModel): its signatures, of the model in float32. Under AMP the model is
    rebuilt in float32 with the trained weights (``ExportModule.float32``; AMP keeps float32
    weights), so the graph holds no casts and TensorRT picks the engine's precision
    (``trtexec --fp16``), as NVIDIA's ONNX exports do. The ONNX files' inputs and outputs are
    named as the signatures name theirs."""
    from common.export.module import float32_saved_model
    with tempfile.TemporaryDirectory(dir=export_dir) as tmp:
        source = export_dir if module.float32 is None else float32_saved_model(module, tmp)
        try:
            written = [export(source, os.path.join(export_dir, name), signature,
                              log_dir=module.log_dir)
                       for name, signature in module.spec.onnx_files.items()]
        except RuntimeError as e:
            raise TrainingError(f"{e}; the SavedModel in {export_dir} is complete") from None
    for path in written:
        with_defaults(path, module.spec.onnx_defaults)
    return written


# --- inputs a caller may leave out (``ExportSpec.onnx_defaults``): ONNX's default value of a
# graph input is an initializer of the same name, which ONNX Runtime feeds when the input is not
# given and which TensorRT's parser would take for a constant.
def with_defaults(path: str, defaults) -> None:
    """Inputs of the ONNX file at ``path`` that a caller may leave out: each also an
    initializer of zeros of its ``defaults`` shape (ONNX's default value of a graph input;
    ONNX Runtime feeds it when the input is not given)."""
    if not defaults:
        return
    import numpy as np
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    for name, shape in defaults.items():
        dtype = onnx.helper.tensor_dtype_to_np_dtype(types[name])
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(shape, dtype), name))
    onnx.save(model, path)


def without_defaults(src: str, dst: str) -> None:
    """The ONNX file at ``src`` written to ``dst`` without its inputs' default values (the
    initializers named as graph inputs): every input is then the caller's."""
    import onnx
    model = onnx.load(src)
    inputs = {i.name for i in model.graph.input}
    kept = [t for t in model.graph.initializer if t.name not in inputs]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    onnx.save(model, dst)


# --- the export's external tools (tf2onnx, Model Optimizer), each run in a process of its own:
# they rewrite graphs with process-wide settings, need another environment, or print many lines
# that belong in a log of their own, not in the run's or beside what they write.
def run_with_log(cmd: Sequence[str], prefix: str, output: str, cwd: str | None = None,
                 check: Callable[[str], str | None] | None = None,
                 log_dir: str | None = None) -> str | None:
    """Runs a tool (tf2onnx, Model Optimizer) whose many lines belong in a log of their own,
    not beside what it writes: a file in ``log_dir`` (the run's results directory; the
    temporary directory without one), removed when the tool succeeds: exit 0, ``output``
    written and, with ``check``, ``check(output)`` None (what the tool wrote is what it should
    be: a tool can exit 0 with a cut or junk file). None then; else "(log: PATH): the reason",
    for the caller's one line."""
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
    fd, log_path = tempfile.mkstemp(prefix=prefix, suffix=".log", dir=log_dir)
    try:
        with os.fdopen(fd, "w") as log:
            proc = subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    except OSError as e:  # the tool's python is gone, or not a program
        os.remove(log_path)
        return f"({cmd[0]} cannot run: {e.strerror})"
    except BaseException:  # a stop signal cut the tool short: its half log tells nothing
        os.remove(log_path)
        raise
    if proc.returncode == 0 and os.path.exists(output):
        wrong = check(output) if check else None
        if wrong is None:
            os.remove(log_path)
            return None
        return f"(log: {log_path}): it exited 0, but {wrong}"
    with open(log_path, errors="replace") as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    if proc.returncode == 0:
        return f"(log: {log_path}): it exited 0 without writing {os.path.basename(output)}"
    return f"(log: {log_path}): {one_line(lines[-1]) if lines else 'no output'}"
