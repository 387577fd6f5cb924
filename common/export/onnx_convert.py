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
import sys
import tempfile

from common.errors import TrainingError, UsageError
from common.export import onnx_defaults
from common.export.tools import run_with_log

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
        onnx_defaults.with_defaults(path, module.spec.onnx_defaults)
    return written
