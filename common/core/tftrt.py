"""TF-TRT for ``--mode inference_benchmark --use_tftrt FP32|FP16``: the model's SavedModel
(the one ``--export_dir`` writes) converted by TensorFlow's TensorRT
integration, engines built for the benchmark's input shapes, then timed through its serving
signature.

TF-TRT exists only in a TensorFlow built with TensorRT that can load libnvinfer: NVIDIA's
TensorFlow containers, 25.02 being the last. TensorFlow 2.18 and later from pip ship the Python
module without the kernels, and a pip TensorFlow 2.17 cannot find the library; both are
refused at start-up with one line. Elsewhere, the route to TensorRT is the ONNX export and
``trtexec`` (README).
"""
from __future__ import annotations

import os

import tensorflow as tf

from common import files
from common.errors import UsageError


def _trt_convert():
    from tensorflow.python.compiler.tensorrt import trt_convert
    return trt_convert


def available() -> bool:
    """Whether this TensorFlow can run TF-TRT: built with TensorRT, and the library loads."""
    if not tf.sysconfig.get_build_info().get("is_tensorrt_build"):
        return False
    try:
        from tensorflow.compiler.tf2tensorrt import _pywrap_py_utils
        return bool(_pywrap_py_utils.is_tensorrt_enabled())
    except ImportError:
        return False


def require(precision: str, mode: str) -> None:
    """One line at start-up when ``--use_tftrt`` cannot be honoured."""
    if mode != "inference_benchmark":
        raise UsageError(f"--use_tftrt applies to --mode inference_benchmark, not {mode}")
    if not available():
        raise UsageError(
            f"--use_tftrt {precision}: this TensorFlow {tf.__version__} was built without "
            "TensorRT (or cannot load libnvinfer); TF-TRT exists only in NVIDIA's TensorFlow "
            "containers (25.02 is the last). Export ONNX (--export_onnx) and build an engine "
            "with trtexec instead (README)")


def serving_arguments(signature, inputs) -> dict:
    """``inputs`` (a tensor, or a dict by argument name) as the keyword arguments of a
    SavedModel signature."""
    names = sorted(signature.structured_input_signature[1])
    if isinstance(inputs, dict):
        missing = set(names) - set(inputs)
        if missing:
            raise ValueError(f"the serving signature also needs {sorted(missing)}")
        return {n: inputs[n] for n in names}
    if len(names) != 1:
        raise ValueError(f"the serving signature takes {names}: give them by name")
    return {names[0]: inputs}


def convert(saved_model: str, out_dir: str, precision: str, signature_key: str, example: dict,
            log=print) -> str:
    """The ``signature_key`` function of ``saved_model`` converted with TF-TRT at
    ``precision``, its engines built for the shapes of ``example`` (the signature's keyword
    arguments), saved to ``out_dir``."""
    trt = _trt_convert()
    converter = trt.TrtGraphConverterV2(
        input_saved_model_dir=saved_model,
        input_saved_model_signature_key=signature_key,
        precision_mode=precision,
        # Shapes unknown at export (TXL's sequence and memory lengths, SSD's batch) need
        # explicit-batch engines with optimisation profiles, built below from the example.
        use_dynamic_shape=True,
        dynamic_shape_profile_strategy="Optimal",
        max_workspace_size_bytes=1 << 32,
        minimum_segment_size=3,
        maximum_cached_engines=1,
        allow_build_at_runtime=True)
    log(f"tftrt: converting {saved_model} at {precision}")
    converter.convert()
    converter.build(input_fn=lambda: iter([example]))
    with files.staged_dir(out_dir, "the TF-TRT conversion") as stage:
        converter.save(stage)
    log(f"tftrt: saved the converted model to {out_dir}")
    return out_dir


def load_serving(path: str, key: str = "serving_default"):
    """The ``key`` signature of a SavedModel (kept alive with its module)."""
    module = tf.saved_model.load(path)
    fn = module.signatures[key]
    fn._keep = module  # the signature does not own the variables it reads
    return fn


def paths(results_dir: str) -> tuple[str, str]:
    """Where the SavedModel to convert and its TF-TRT conversion go."""
    root = os.path.join(results_dir, "tftrt")
    return os.path.join(root, "saved_model"), os.path.join(root, "converted")


def benchmark_infer(module, serving_call, results_dir: str, precision: str, inputs, state,
                    log=print):
    """``infer(x, state) -> (outputs, state)`` through the ``ExportModule``'s SavedModel (of the
    model in float32) converted by TF-TRT at ``precision``, with engines built for the shapes
    of ``inputs``: exported, converted and loaded here, before any step is timed.
    ``serving_call(inputs, state)``: the signature to call and its arguments
    (``Exports.serving_call``)."""
    from common.export.module import float32_saved_model
    saved, converted = paths(results_dir)
    key, example = serving_call(inputs, state)
    # TF-TRT converts what it is given: an AMP graph's float16 casts would make "FP32" mean
    # float16 in places. The model is exported in float32 and TF-TRT sets the precision.
    with files.staged_dir(saved, "the SavedModel for TF-TRT") as stage:
        float32_saved_model(module, stage)
    convert(saved, converted, precision, key,
            serving_arguments(load_serving(saved, key), example), log=log)
    fn = load_serving(converted, key)

    def infer(x, state):
        return fn(**serving_arguments(fn, serving_call(x, state)[1])), state
    return infer
