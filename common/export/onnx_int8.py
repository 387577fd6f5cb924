"""``--export_onnx_int8``: an INT8 ONNX in explicit quantization form (QuantizeLinear /
DequantizeLinear pairs), calibrated on training images, for ``trtexec --int8``.

TensorRT deprecated implicit INT8 calibration (a calibrator and a calibration cache) in 10.1;
what it takes now is a network whose INT8 places and scales are written in it as Q/DQ nodes.
ONNX Runtime's static quantization (``onnxruntime.quantization``, QDQ format) writes them:

* the float32 ONNX is first pre-processed (shape inference; ONNX Runtime's basic graph
  optimizations, which fold batch normalization into the convolutions), so that the weights
  quantized are the ones the engine multiplies by;
* activations are calibrated on ``--calibration_images`` training images preprocessed as for
  evaluation (no augmentation) and quantized symmetric (zero point 0: TensorRT takes only
  that), weights per output channel, symmetric;
* only the inputs of convolutions and matrix multiplications are quantized, as TensorRT's own
  guidance places Q/DQ; biases and every other op stay float32 (ReLU kept explicit), and
  TensorRT fuses around them.

The same file runs under ONNX Runtime on a CPU (``benchtools.int8_accuracy`` measures its
accuracy against the float32 ONNX on held-out data); TensorRT builds an engine from it with
``trtexec --onnx=model_int8.onnx --int8 --fp16``.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
from collections.abc import Callable, Iterable

import numpy as np

from common.errors import TrainingError, UsageError, one_line

QUANTIZED_OPS = ("Conv", "MatMul", "Gemm")


def require() -> None:
    """One line at start-up when ONNX Runtime's quantization tools are missing."""
    if importlib.util.find_spec("onnxruntime") is None:
        raise UsageError("--export_onnx_int8 needs onnxruntime (its quantization tools): run "
                         "'bash scripts/install_deps.sh' (or pip install onnxruntime)")


def int8_name(onnx_file: str) -> str:
    """model.onnx -> model_int8.onnx."""
    root, ext = os.path.splitext(onnx_file)
    return f"{root}_int8{ext}"


class _Reader:
    """ONNX Runtime's CalibrationDataReader over ``batches()`` (a fresh iterable each time)."""

    def __init__(self, input_name: str, batches: Callable[[], Iterable[np.ndarray]]):
        self.input_name, self._batches, self._it = input_name, batches, None

    def get_next(self):
        if self._it is None:
            self._it = iter(self._batches())
        batch = next(self._it, None)
        return None if batch is None else {self.input_name: np.asarray(batch, np.float32)}

    def rewind(self):
        self._it = None


def quantize(float_path: str, int8_path: str,
             batches: Callable[[], Iterable[np.ndarray]]) -> str:
    """``float_path`` calibrated on ``batches()`` (model inputs, float32) and quantized to
    ``int8_path``. An activation's range is the largest magnitude calibration saw (ONNX
    Runtime's MinMax made symmetric: NVIDIA Model Optimizer's INT8 default). The histogram
    methods (percentile, entropy) are not offered: ONNX Runtime keeps every calibration
    batch's activations in memory for them (tens of GB for ResNet-50 at 512 images), and fails
    on a tensor whose values all but coincide."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    input_name = onnx.load(float_path, load_external_data=False).graph.input[0].name
    options = {"ActivationSymmetric": True, "WeightSymmetric": True,
               "QDQKeepRemovableActivations": True,  # ReLU stays: ranges are symmetric
               "QDQOpTypePerChannelSupportToAxis": {"MatMul": 1},  # a weight's output axis
               "QuantizeBias": False,  # TensorRT dequantizes INT8 only, not INT32 biases
               # TensorRT's placement: the inputs of weighted ops, not their outputs.
               "OpTypesToExcludeOutputQuantization": list(QUANTIZED_OPS)}
    with tempfile.TemporaryDirectory(dir=os.path.dirname(int8_path) or ".") as tmp:
        prepared = os.path.join(tmp, "prepared.onnx")
        quant_pre_process(float_path, prepared, skip_symbolic_shape=True)
        try:  # ONNX Runtime prints its calibration's progress on stdout: not the run's log
            with contextlib.redirect_stdout(io.StringIO()):
                quantize_static(
                    prepared, int8_path, _Reader(input_name, batches),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    op_types_to_quantize=list(QUANTIZED_OPS),
                    calibrate_method=CalibrationMethod.MinMax, extra_options=options)
        except ValueError as e:
            raise TrainingError(f"INT8 calibration of {os.path.basename(float_path)} failed "
                                f"({one_line(str(e))})") from None
    return int8_path


def export_serving(serving, export_dir: str, log) -> list[str]:
    """An INT8 file beside each of the model's ONNX files in ``export_dir``, calibrated on its
    ``calibration_batches``; returns their paths."""
    seen = []  # images of each pass

    def batches():
        seen.append(0)
        for batch in serving.calibration_batches():
            seen[-1] += len(batch)
            yield batch

    out = [quantize(os.path.join(export_dir, name), os.path.join(export_dir, int8_name(name)),
                    batches) for name in serving.onnx_files]
    asked = serving.flags.calibration_images
    log(f"INT8 calibrated on {seen[0] if seen else 0} training images (max)"
        + (f": the training split holds fewer than --calibration_images {asked}"
           if seen and seen[0] < asked else ""))
    return out
