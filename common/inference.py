"""What a trained model is used for after training: the model inference runs, predictions on
files, and the export (SavedModel, and ONNX with ``--export_onnx``)."""
from __future__ import annotations

import json
import os
import tempfile

import keras
import tensorflow as tf

from common import files, onnx_export, onnx_int8, precision, tftrt
from common.errors import DataError, UsageError, one_line

INFERENCE_MODES = ("evaluate", "predict", "inference_benchmark")  # the runs that only infer


class InferenceModel:
    """The model that evaluation, prediction and the inference benchmark run. In a run that
    only infers (``--mode evaluate``, ``predict``, ``inference_benchmark``) under AMP, for a
    task that allows it (``Task.infers_in_compute_dtype``): a copy holding the weights in the
    compute dtype (``precision.compute_dtype_copy``), made once, after the restore. Otherwise
    the model itself, float32 weights cast at every step under AMP."""

    def __init__(self, task, model: keras.Model, ctx):
        self.task, self.model, self.ctx = task, model, ctx
        self._copy = None

    def __call__(self) -> keras.Model:
        p, mode = self.ctx.precision, self.ctx.flags.mode
        if not (p.amp and self.task.infers_in_compute_dtype and mode in INFERENCE_MODES):
            return self.model
        if self._copy is None:
            self._copy = precision.compute_dtype_copy(self.task.build_model, self.model,
                                                      p.compute_dtype)
            self.ctx.logger.print(f"inference on a copy of the model with {p.compute_dtype} "
                                  "weights (no casts of float32 weights at each step)")
        return self._copy

    @property
    def weights_dtype(self) -> str:
        """The weights' dtype that inference ran with: the summary records it."""
        return self.ctx.precision.compute_dtype if self._copy is not None else "float32"


def predict(task, model: keras.Model, paths, dist, log, results_dir: str,
            epoch: int = 0) -> dict:
    """Every file's predictions, in order, into ``predictions.json`` (written whole or not at
    all), logged under the checkpoint's ``epoch``. A file that cannot be read is reported,
    recorded with its error and skipped; the run fails only when no file can be read."""
    records, failed = [], []
    for n, path in enumerate(paths, 1):
        try:
            found = task.predict_file(model, path)
        except (DataError, OSError, tf.errors.OpError) as e:
            why = str(e) if isinstance(e, DataError) else f"{path}: {one_line(str(e))}"
            failed.append(why)
            found = [{"file": path, "error": why}]
            log.print(f"skipped {path}: {why}")
        for r in found:
            said = task.describe_prediction(r) if "error" not in r else None
            count = f"[{n}/{len(paths)}] " if len(paths) > 1 else ""
            log.log((epoch, len(records)), r, text=f"{count}{said}" if said else None)
            records.append(r)
    if len(failed) == len(paths):
        raise DataError(failed[0] if len(paths) == 1 else
                        f"none of the {len(paths)} files could be read (first: {failed[0]})")
    if dist.is_chief:
        out = os.path.join(results_dir, "predictions.json")
        files.write_atomically(out, json.dumps(records, indent=1))
        log.print(f"wrote {len(records) - len(failed)} predictions to {out}"
                  + (f" ({len(failed)} file(s) skipped)" if failed else ""))
    return {"predictions": len(records) - len(failed), "skipped_files": len(failed)}


def export(task, model: keras.Model, export_dir: str, with_onnx: bool, log,
           int8: bool = False) -> None:
    """The task's SavedModel in ``export_dir``, and its ONNX files beside it (rank 0 only),
    with ``int8`` their INT8 forms too, swapped in only once all of them are written
    (``files.staged_dir``): a full disk or a failed conversion leaves no half-written
    export."""
    with files.staged_dir(export_dir, "the export", replaces=export_names(task),
                          log=log.print) as stage:
        task.export(model, stage)
        onnx = onnx_export.export_task(task, model, stage) if with_onnx else []
        if int8:
            onnx += onnx_int8.export_task(task, stage, log.print)
    log.print(f"exported a SavedModel to {export_dir}")
    for path in onnx:
        log.print(f"exported ONNX (opset {onnx_export.OPSET}) to "
                  f"{os.path.join(export_dir, os.path.basename(path))}")


def check_export_dir(task, model: keras.Model, flags, log) -> None:
    """--export_dir that is a file, read-only or too small for the export (measured by a trial
    export) stops the run before training; so does a calibration record that cannot be read
    (``--export_onnx_int8``), not after the training."""
    files.check_output_dir(flags.export_dir, "--export_dir", 1 << 20, "the export needs")
    need = export_bytes(task, model, flags.export_dir, flags.export_onnx or flags.export_onnx_int8,
                        flags.export_onnx_int8, log)
    files.check_output_dir(flags.export_dir, "--export_dir", need, "the export needs")
    if flags.export_onnx_int8:
        for _ in task.calibration_batches():
            pass


def benchmarked_function(task, model, inference_model, data, flags, world: int, xla: bool,
                         log):
    """(the function an inference benchmark times, its first state): the serving computation
    of ``inference_model()``, or with --use_tftrt the model converted by TF-TRT (one GPU)."""
    if flags.use_tftrt:
        if world > 1:
            raise UsageError("--use_tftrt benchmarks one GPU: run it without mpirun/horovodrun")
        state = task.initial_state(model, "infer")
        return tftrt.benchmark_infer(task, model, flags.results_dir, flags.use_tftrt,
                                     task.inference_inputs(next(data)), state,
                                     log=log.print), state
    served = inference_model()
    state = task.initial_state(served, "infer")
    return tf.function(lambda x, state: task.infer(served, x, state), jit_compile=xla), state


def export_names(task) -> set[str]:
    """Every entry an export of ``task`` may write in its directory: a new export replaces
    them all (an INT8 file left from an earlier export would be taken for this one's)."""
    onnx = set(task.onnx_files) | {onnx_int8.int8_name(n) for n in task.onnx_files}
    return {"saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra",
            *onnx}


def export_bytes(task, model: keras.Model, export_dir: str, with_onnx: bool,
                 with_int8: bool = False, log=None) -> int:
    """What the export will take in ``export_dir``, from a real SavedModel of ``model`` written
    there now and removed (before training: the same graph and weights' size), once more for
    each ONNX file (each holds the float32 weights and the graph, about a SavedModel's size),
    with a tenth to spare. A directory too small for even the trial stops the run with one
    line."""
    try:
        files.clear_stale(export_dir, log)
        with tempfile.TemporaryDirectory(prefix=files.PROBE, dir=export_dir) as tmp:
            task.export(model, tmp)
            size = files.tree_bytes(tmp)
    except (OSError, tf.errors.OpError) as e:
        why = one_line(getattr(e, "message", None) or e.strerror or str(e))
        raise DataError(f"--export_dir {export_dir} cannot hold the export: a trial export "
                        f"failed ({why})") from None
    copies = 1 + (len(task.onnx_files) if with_onnx else 0) * (2 if with_int8 else 1)
    return int(1.1 * size * copies) + (1 << 20)
