"""What a trained model is used for after training: the model inference runs, predictions on
files, the inference benchmark's function. Exports are ``common.export``'s."""
from __future__ import annotations

import json
import os

import keras
import tensorflow as tf

from common import files, graph, precision
from common.core import tftrt
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


def predict(exports, model: keras.Model, paths, dist, log, results_dir: str,
            epoch: int = 0) -> dict:
    """Every file's predictions (``exports.predict_file``), in order, into ``predictions.json``
    (written whole or not at all), logged under the checkpoint's ``epoch``. A file that cannot
    be read is reported, recorded with its error and skipped; the run fails only when no file
    can be read."""
    records, failed = [], []
    for n, path in enumerate(paths, 1):
        try:
            found = exports.predict_file(model, path)
        except (DataError, OSError, tf.errors.OpError) as e:
            why = str(e) if isinstance(e, DataError) else f"{path}: {one_line(str(e))}"
            failed.append(why)
            found = [({"file": path, "error": why}, f"skipped {path}: {why}")]
        for r, said in found:  # one line a record: the prediction, or why the file was skipped
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


def require(flags) -> None:
    """One line at start-up where the inference benchmark's --use_tftrt cannot be honoured
    (``tftrt.require``: a TensorFlow without TensorRT, another mode)."""
    if flags.use_tftrt:
        tftrt.require(flags.use_tftrt, flags.mode)


def benchmarked_function(task, exports, model, inference_model, data, flags, world: int,
                         xla: bool, log, module=None):
    """(the function an inference benchmark times, its first state): the serving computation
    (``exports.infer``) of ``inference_model()``, or with --use_tftrt the ``ExportModule``'s
    (``module``'s) float32 SavedModel converted by TF-TRT (one GPU)."""
    if flags.use_tftrt:
        if world > 1:
            raise UsageError("--use_tftrt benchmarks one GPU: run it without mpirun/horovodrun")
        state = task.initial_state(model, "infer")
        return tftrt.benchmark_infer(module, exports.serving_call, flags.results_dir,
                                     flags.use_tftrt, inference_inputs(exports, next(data)),
                                     state, log=log.print), state
    served = inference_model()
    state = task.initial_state(served, "infer")
    return graph.function(lambda x, state: exports.infer(served, x, state), jit_compile=xla), state


def inference_inputs(exports, batch):
    """The model inputs of a data batch (``exports.inference_input``: an index, a key, or None
    for the whole batch)."""
    return batch if exports.inference_input is None else batch[exports.inference_input]


def inference_dataset(task, streams: bool, data_dir: str | None, batch_size: int):
    """Batches for the inference benchmark, endless and all of one size (a smaller last batch
    would be compiled anew inside the timed steps): evaluation data if any, else synthetic;
    streams that carry a state (``streams``: the task's evaluation streams, real or synthetic)
    in order, the short last ones dropped."""
    if streams:  # synthetic or not, the task's evaluation streams
        return task.eval_dataset(drop_short=True).repeat()
    if not data_dir:
        return task.train_dataset()
    data = task.eval_dataset()
    from common.data import dali
    if isinstance(data, dali.EvalPass):
        return data.served  # the padded last batch kept: its rows are as costly
    return data.unbatch().repeat().batch(batch_size, drop_remainder=True)
