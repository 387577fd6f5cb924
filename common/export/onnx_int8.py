"""``--export_onnx_int8``: an INT8 ONNX in explicit quantization form (QuantizeLinear /
DequantizeLinear pairs) by NVIDIA Model Optimizer, calibrated on training images, for
``trtexec --int8``.

TensorRT deprecated implicit INT8 calibration (a calibrator and a calibration cache) in 10.1;
what it takes now is a network whose INT8 places and scales are written in it as Q/DQ nodes.
NVIDIA's route to that file is Model Optimizer's ONNX quantization
(``modelopt.onnx.quantization``), which places Q/DQ where TensorRT fuses them: the inputs and
weights of convolutions, the residual additions' inputs, pooling, weights per output channel,
activations per tensor, symmetric (zero point 0). Here:

* calibration runs on ``--calibration_images`` training images preprocessed as for evaluation
  (no augmentation), through ONNX Runtime's CPU provider (``--calibration_eps cpu``: it needs
  no GPU); an activation's range is the largest magnitude seen (``max``: Model Optimizer's
  ``entropy`` keeps every calibration batch's activations in memory, tens of GB for ResNet-50
  at 512 images);
* what stays unquantized stays float32 (``--high_precision_dtype fp32``), as the float ONNX
  is: TensorRT picks FP16 for it with ``--fp16``, and ONNX Runtime on a CPU runs it as it is.

Model Optimizer needs PyTorch, which does not belong in TensorFlow's environment (each pins its
own CUDA libraries and numpy): it runs in an environment of its own, ``scripts/modelopt_env.sh``
(or ``MODELOPT_PYTHON``), in a process of its own, as tf2onnx does. The same file runs under
ONNX Runtime (``benchtools.int8_accuracy`` measures its accuracy against the float32 ONNX on
held-out data); TensorRT builds an engine from it with ``trtexec --int8 --fp16``.
"""
from __future__ import annotations

import os
import subprocess
import tempfile

import numpy as np

from common.errors import TrainingError, UsageError
from common.export.onnx_convert import run_with_log

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV_SCRIPT = os.path.join(ROOT, "scripts", "modelopt_env.sh")
PYTHON_ENV = "MODELOPT_PYTHON"


def modelopt_python() -> str | None:
    """The python that runs Model Optimizer: ``MODELOPT_PYTHON``, else the environment
    ``scripts/modelopt_env.sh`` made (None where it has not been made)."""
    if os.environ.get(PYTHON_ENV):
        python = os.environ[PYTHON_ENV]
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            what = "a directory" if os.path.isdir(python) else "not a program" \
                if os.path.exists(python) else "not there"
            raise UsageError(f"--export_onnx_int8: {PYTHON_ENV}={python} is {what}: set it to "
                             "a python with nvidia-modelopt[onnx] (its bin/python), or unset it")
        return python
    proc = subprocess.run(["bash", ENV_SCRIPT, "--where"], capture_output=True, text=True)
    path = proc.stdout.strip()
    return path if proc.returncode == 0 and os.path.exists(path) else None


def require() -> str:
    """One line at start-up when Model Optimizer cannot run (not after a whole training run);
    the python that runs it."""
    python = modelopt_python()
    given = f"{PYTHON_ENV}={python}" if os.environ.get(PYTHON_ENV) else python
    try:
        imports = python and subprocess.run([python, "-c", "import modelopt.onnx.quantization"],
                                            capture_output=True).returncode == 0
    except OSError:
        imports = False
    if imports:
        return python
    if os.environ.get(PYTHON_ENV):
        raise UsageError(f"--export_onnx_int8: {given} cannot import modelopt.onnx.quantization "
                         "(pip install 'nvidia-modelopt[onnx]' there, or unset it)")
    raise UsageError("--export_onnx_int8 quantizes with NVIDIA Model Optimizer, which needs "
                     "PyTorch in an environment of its own: run 'bash scripts/modelopt_env.sh' "
                     "once (about 6 GB), or set MODELOPT_PYTHON to a python with "
                     "nvidia-modelopt[onnx]")


def int8_name(onnx_file: str) -> str:
    """model.onnx -> model_int8.onnx."""
    root, ext = os.path.splitext(onnx_file)
    return f"{root}_int8{ext}"


def check_quantized(float_path: str):
    """What Model Optimizer's output must be before it may replace anything: a model the ONNX
    checker passes, quantized (Q/DQ pairs), with the float model's inputs and outputs."""
    def check(int8_path: str) -> str | None:
        import onnx
        try:
            model = onnx.load(int8_path)
            onnx.checker.check_model(model)
        except Exception as e:  # onnx raises DecodeError, ValidationError, OSError...
            return (f"{os.path.basename(int8_path)} is not a valid ONNX model "
                    f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})")
        ops = {n.op_type for n in model.graph.node}
        if not {"QuantizeLinear", "DequantizeLinear"} <= ops:
            return f"{os.path.basename(int8_path)} holds no QuantizeLinear/DequantizeLinear pair"
        reference = onnx.load(float_path, load_external_data=False)
        names = [[t.name for t in g.input] + ["->"] + [t.name for t in g.output]
                 for g in (reference.graph, model.graph)]
        if names[0] != names[1]:
            return (f"{os.path.basename(int8_path)}'s inputs and outputs {names[1]} are not "
                    f"the float model's {names[0]}")
        return None
    return check


def quantize(float_path: str, int8_path: str, images: np.ndarray, python: str,
             log_dir: str | None = None) -> str:
    """``float_path`` calibrated on ``images`` (model inputs, float32) and quantized to INT8 by
    Model Optimizer (run by ``python``) at ``int8_path``, checked (``check_quantized``) before
    anything uses it. Its log goes to a file in ``log_dir`` (the run's results directory),
    kept (and named) only when the quantization fails."""
    import onnx
    input_name = onnx.load(float_path, load_external_data=False).graph.input[0].name
    with tempfile.TemporaryDirectory(dir=os.path.dirname(int8_path) or ".") as tmp:
        data = os.path.join(tmp, "calibration.npz")
        np.savez(data, **{input_name: images})
        failed = run_with_log(
            [python, "-m", "modelopt.onnx.quantization", "--onnx_path", float_path,
             "--quantize_mode", "int8", "--calibration_method", "max",
             "--calibration_data_path", data, "--calibration_eps", "cpu",
             "--high_precision_dtype", "fp32", "--output_path", int8_path],
            "modelopt-", int8_path, cwd=tmp, check=check_quantized(float_path),
            log_dir=log_dir)
    if failed:
        raise TrainingError(f"INT8 quantization of {os.path.basename(float_path)} by Model "
                            f"Optimizer failed {failed}")
    return int8_path


def export_module(module, export_dir: str, log) -> list[str]:
    """An INT8 file beside each of the ``ExportModule``'s ONNX files in ``export_dir``, all
    calibrated on the same batches (``module.calibration``, read once); returns their paths.
    Model Optimizer's environment was checked at start-up (``require``)."""
    if module.calibration is None:
        raise UsageError(f"--export_onnx_int8: {module.name} has no training records to "
                         "calibrate on")
    python = modelopt_python() or require()
    asked = module.calibration_images
    images = np.concatenate([np.asarray(b, np.float32) for b in module.calibration(asked)])
    out = [quantize(os.path.join(export_dir, name), os.path.join(export_dir, int8_name(name)),
                    images, python, module.log_dir)
           for name in module.spec.onnx_files]
    log(f"INT8 by NVIDIA Model Optimizer, calibrated on {len(images)} training images (max)"
        + (f": the training split holds fewer than --calibration_images {asked}"
           if len(images) < asked else ""))
    return out
