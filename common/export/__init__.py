"""Exports of a trained model, the same for every model: ``--export_dir`` (a SavedModel whose
signatures a client calls, with ``assets/``), ``--export_onnx`` and ``--export_onnx_int8`` (its
ONNX files for TensorRT and ONNX Runtime), ``--export_triton`` (Triton model repositories, one
per kind of server). What each holds is the model's exports object's
(``common.export.module.Exports``); this package writes it. TF-TRT's conversion for the
inference benchmark (``--use_tftrt``) is ``common.core.tftrt``, beside that benchmark.

* ``writer``: the export and the Triton repository written whole, and the checks before
  training.
* ``module``: the base of each model's exports object, the ``ExportModule`` value ``build``
  makes of a model, ``client.json``, and the float32 SavedModel that ONNX and TF-TRT convert.
* ``onnx_convert``: SavedModel signatures to ONNX (tf2onnx, in a process of its own), the
  inputs a caller may leave out, and the external tools' runs (their logs kept only on
  failure).
* ``onnx_int8``: INT8 ONNX in Q/DQ form, calibrated on training images.
* ``triton/``: the Triton Inference Server side: the model repositories of the export, their
  configs, TensorRT's engines and the Python-backend models the repositories copy.
"""
from common.export.module import ExportModule, build, model_card, read_client_info
from common.export.writer import (
    check_export_dir,
    export,
    export_bytes,
    export_names,
    onnx_opset,
    require_tools,
    writes_onnx,
)

__all__ = ["ExportModule", "build", "check_export_dir", "export", "export_bytes",
           "export_names", "model_card", "onnx_opset", "read_client_info", "require_tools",
           "writes_onnx"]
