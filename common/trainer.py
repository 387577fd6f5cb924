"""The Trainer every mode runs on: ``train`` is the step loop (``common/core/loop.py``) with the
training run's actions hung off its sync points (log, save, evaluate, stop)."""
from __future__ import annotations

import functools
import math
import os
import time

import keras
import tensorflow as tf

from common import export, files, precision
from common import task as task_lib
from common.checkpoint import start, store
from common.checkpoint.settings import dir_name, record_scores, scores_at, scores_of
from common.core import benchmark, inference, loop, train_step
from common.core.evaluation import Evaluator
from common.core.nonfinite import NonFiniteGuard, first_non_finite
from common.core.steppers import InferStepper, TrainStepper
from common.data.input_errors import read_batches
from common.errors import DataError, TrainingError
from common.runtime import job_time, watchdog
from common.runtime.graceful_stop import GracefulStop
from common.task import RunContext, Task
from common.tools import profiling


class Trainer:
    """Every mode of one run on one task: it builds the task's model and optimizer (with loss
    scaling for float16) and their checkpoint store, restores (or fine-tunes from another
    checkpoint), trains on the step loop (``common/core/loop.py``) and saves, evaluates
    (``common/core/evaluation.py``), benchmarks (``common/core/benchmark.py``, given a stepper),
    predicts (``common/core/inference.py``) and exports (``common/export/``)."""

    def __init__(self, task: Task, ctx: RunContext):
        self.task, self.ctx = task, ctx
        self.flags, self.dist, self.log = ctx.flags, ctx.dist, ctx.logger
        self.model = task.build_model()
        self.steps_per_epoch = max(1, task.steps_per_epoch())
        self.optimizer = precision.wrap_optimizer(
            task.build_optimizer(self.steps_per_epoch, self.total_steps()), ctx.precision)
        self.optimizer.build(self.model.trainable_variables)
        self.loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.guard = NonFiniteGuard(self.model.trainable_variables, self.flags.max_bad_steps)
        # The optimizer without its loss-scale wrapper: what checkpoints save (so that any
        # precision resumes any other) and logs describe.
        self.inner_optimizer = (self.optimizer.inner_optimizer if self.loss_scaled
                                else self.optimizer)
        loss_scale = ({"dynamic_scale": self.optimizer.dynamic_scale,
                       "step_counter": self.optimizer.step_counter} if self.loss_scaled else None)
        self.checkpoints = store.CheckpointStore(
            self.flags.model_dir, {"model": self.model, "optimizer": self.inner_optimizer,
                                   "global_step": self.global_step},
            loss_scale, keep=self.flags.keep_checkpoints, log=self.log.print)
        # The model's exports object: what its exports hold and what inference is.
        self.exports = task.exports_class(task) if task.exports_class else None
        self.scored: dict | None = None  # what evaluate() scored, for the model card
        self._check_output_dirs()
        self._compiled_step = None
        self.watch = watchdog.OFF  # a training run's hang watch (train)
        self.inference_model = inference.InferenceModel(task, self.model, ctx)
        self.evaluator = Evaluator(task, ctx, self.inference_model,
                                   functools.partial(task_lib.check_inputs, task))
        self.profiler = profiling.StepProfiler(
            self.flags.profile, os.path.join(self.flags.results_dir, "tensorboard"), self.log,
            enabled=self.dist.is_chief)
        self.log.print(f"{task.name}: {store.count(self.model.trainable_variables):,} "
                       f"trainable parameters, {store.count(self.model.variables):,} in all")

    def _check_output_dirs(self) -> None:
        """A checkpoint or export directory that is a file, read-only or full stops the run
        now, not at the first save an epoch later (or after the training an export follows);
        so do leftovers that need cleaning first."""
        f = self.flags
        if f.mode in ("train", "train_and_evaluate"):
            need = int(1.1 * store.nbytes(self.state())) + (1 << 20)
            self.dist.on_chief(lambda: (
                files.check_output_dir(f.model_dir, "--model_dir", need, "a checkpoint needs"),
                self.checkpoints.clean_leftovers()), "checking --model_dir")
        if f.export_dir:  # its room measured by a trial export
            self.dist.on_chief(lambda: export.check_export_dir(self.export_module, f,
                                                               self.log.print),
                               "checking --export_dir")

    @functools.cached_property
    def export_module(self):  # made once: the trial export and the export save one trace
        """The model as its exports hold it (``common.export.module.ExportModule``)."""
        return export.build(self.exports, self.model)

    # --- state ----------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def state(self):
        return list(self.model.variables) + list(self.optimizer.variables) + [self.global_step]

    def restore(self, required: bool = False, prefix: str | None = None) -> str | None:
        """Rank 0 restores the newest readable checkpoint; then every rank takes rank 0's state.
        A training run moves unreadable newer checkpoints aside (common/checkpoint/store.py);
        one with nothing to resume starts from a fine-tuning checkpoint's weights
        (``start.begin``). ``prefix`` (``DIR/ckpt-N``) restores that checkpoint instead."""
        path = self.dist.on_chief(
            lambda: start.begin(self.task, self.model, self.checkpoints, required, self.log.print,
                                prefix),
            "restoring the checkpoint")
        if path:
            bad = first_non_finite(self.state())
            if bad:
                raise DataError(f"checkpoint {path} holds non-finite values ({bad}): resume from "
                                "an earlier checkpoint (move this one away) or start afresh")
            self.log.print(f"restored {path} at step {self.step}")
        self.dist.broadcast(self.state())
        return path

    def save(self) -> str | None:
        """Rank 0 saves, unless a weight is not finite, with what the checkpoint is beside it
        (``start.record``); a failed save (a full disk) stops every rank with one line."""
        def save():
            with self.watch.working():  # the other ranks wait for it: not a hang
                return write()

        def write():
            bad = first_non_finite(self.state())
            if bad:
                raise TrainingError(f"{bad} is not finite at step {self.step}; stopped without "
                                    f"saving (last checkpoint: {self.checkpoints.latest})")
            path = self.checkpoints.save(self.step)
            start.record(self.task, self.flags.model_dir)
            return path
        return self.dist.on_chief(save, "saving a checkpoint")

    # --- what the loops share -------------------------------------------------------------
    def build_step(self):
        return train_step.build(self.task, self.model, self.optimizer, self.guard,
                                self.global_step, self.dist, self.ctx.precision.xla,
                                self.flags.fp16_allreduce, self.ctx.capabilities.update_compiled)

    def compiled_step(self):
        """The compiled train step (``build_step``), traced once and reused by training and the
        benchmark."""
        if self._compiled_step is None:
            self._compiled_step = self.build_step()
        return self._compiled_step

    def initial_train_states(self) -> tuple:
        """Each micro-batch's starting state (all None for a stateless model)."""
        return tuple(self.task.initial_state(self.model, "train")
                     for _ in range(self.flags.batch_chunk))

    def loss_scale(self) -> float | None:
        return float(self.optimizer.dynamic_scale.numpy()) if self.loss_scaled else None

    # --- training -------------------------------------------------------------------------
    def total_steps(self) -> int:
        f = self.flags
        return f.num_iter * self.steps_per_epoch if f.iter_unit == "epoch" else f.num_iter

    def training_stepper(self, data, steps_per_epoch: int | None) -> TrainStepper:
        """The loop's stepper of the compiled train step (``common/core/train_step.py``) over
        ``data`` (tf.data, DALI or synthetic batches): what training and its benchmark run."""
        guard_last = not self.loss_scaled  # under float16 loss scaling a skipped last step is
        #                                    how the scale finds its level, not an error

        def guard_check(step, loss, last):
            return self.guard.check(step, loss, self.checkpoints.latest, self.loss_scale(),
                                    last=last and guard_last)
        return TrainStepper(self.compiled_step(),
                         read_batches(self.ctx.capabilities.on_device(data),
                                      lambda: task_lib.locate_bad_record(self.task, "train")),
                         self.flags.batch_chunk, self.flags.batch_size, self.dist.size,
                         self.task.items_in, self.initial_train_states,
                         functools.partial(task_lib.check_inputs, self.task),
                         guard_check, steps_per_epoch)

    def train(self, total_steps: int, evaluate: bool = False) -> dict:
        """Trains until ``global_step == total_steps``, resuming from the latest checkpoint:
        the loop (``common/core/loop.py``) dispatches steps and stops at sync points, where this
        logs, saves (before an evaluation, so that a failing one never costs the steps before
        it), evaluates, and stops on a signal with a checkpoint. Throughput counts the steps
        after the warm-up (a run no longer than it is timed whole, compilation included)."""
        f, epoch_steps = self.flags, self.steps_per_epoch
        self.restore()
        start = self.step
        self.log.redo_after(start)  # an earlier job's records of the steps trained again
        if start >= total_steps:
            self.log.print(f"already trained to step {start} (target {total_steps}): nothing to do")
            return {"start_step": start, "final_step": start}
        if evaluate:
            self.evaluator.check_before_training()
        self.profiler.plan(start + 1, total_steps)
        stepper = self.training_stepper(self.task.train_dataset_at(start), epoch_steps)
        short = 0 < f.warmup_steps and total_steps - start <= f.warmup_steps
        clock = loop.Clock(timed_from=start + (0 if short else f.warmup_steps))
        summary, loss, eval_results, displayed = {"start_step": start}, None, {}, 0
        estimated, began = False, time.monotonic()
        self.watch = watchdog.for_run(f.results_dir, self.dist, f.hang_timeout)
        with GracefulStop() as stop, self.watch:
            for sp in loop.run(stepper, f, self.profiler, clock, start=start, total=total_steps,
                               steps_per_epoch=epoch_steps, evaluate=evaluate, stop=stop,
                               dist=self.dist, watchdog=self.watch):
                loss, epoch = sp.value, loop.epoch_of(sp.step, epoch_steps)
                if sp.events.display:
                    self._display(sp, epoch, total_steps, stepper.skipped, clock.rate(displayed))
                    displayed = sp.window_index + 1
                    if not estimated:  # how many Slurm jobs the run needs, said once
                        line = job_time.estimate_from(clock.timed, total_steps - sp.step, sp.step)
                        if line:
                            estimated = True
                            self.log.print(line)
                saved = self.save() if sp.events.save else None
                if sp.events.evaluate:
                    with self.watch.working():
                        eval_results = self.evaluate(epoch=epoch)
                if sp.stopping:  # every rank calls save() once at this step, or none does
                    path = saved if sp.events.save else self.save()  # None on ranks > 0
                    self.log.print(f"{stop.requested_by or 'a signal on another rank'}: stopped at "
                                   f"step {sp.step}, checkpoint {path}; run again to resume")
                    summary["stopped_by_signal"] = True
        summary.update(final_step=self.step, final_loss=loss, epochs=self.step / epoch_steps)
        summary.update(self._train_figures(clock, stepper.skipped, short))
        summary.update(job_time.jobs_so_far(self.log.records(), time.monotonic() - began))
        return {**summary, **eval_results, **self.profiler.report}

    def _display(self, sp, epoch: int, total: int, skipped: int, rate: float) -> None:
        names = self.task.config.LOG_NAMES
        record = {names.loss: sp.value,
                  names.lr: float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))}
        if self.loss_scaled:
            record["loss_scale"] = self.loss_scale()
        if names.perplexity:
            record[names.perplexity] = math.exp(min(float(sp.value), 700.0))
        if skipped:
            record["skipped_steps"] = skipped
        self.log.log((epoch, sp.step), {**record, names.step_throughput: rate},
                     progress=(sp.step, total), tb_step=sp.step)

    def _train_figures(self, clock: loop.Clock, skipped: int, short: bool) -> dict:
        """A training run's summary of its steps: skipped ones, throughput (and whether it
        includes compilation, or leaves out profiled steps)."""
        f, name, out = self.flags, self.task.config.LOG_NAMES.train_throughput, {}
        if skipped:
            out["skipped_steps"] = skipped
            self.log.print(f"{skipped} step(s) had non-finite gradients and were not applied")
        if clock.timed_rate():
            out[name] = clock.timed_rate()
            if short:
                out["throughput_includes_compilation"] = True
                self.log.print(f"{name} includes start-up and compilation: the run "
                               f"has no more steps than --warmup_steps ({f.warmup_steps})")
        if clock.profiled_out:
            out["throughput_excludes_profiled_steps"] = f.profile
        return out

    # --- the other modes ------------------------------------------------------------------
    def evaluate(self, epoch: int | None = None) -> dict:
        """One pass over every rank's evaluation data (``common/core/evaluation.py``), logged under
        the epoch of the checkpoint's step as training numbers them."""
        if epoch is None:
            epoch = loop.epoch_of(self.step, self.steps_per_epoch)
        results = self.evaluator.evaluate(self.step, epoch)
        f = self.flags
        counts = {f"eval_{self.task.item_unit}", self.task.config.LOG_NAMES.eval_throughput}
        self.scored = scores_of(results, split=self.task.eval_split, step=self.step,
                                data=dir_name(f.data_dir), counts=counts)
        if self.dist.is_chief and f.model_dir:
            record_scores(f.model_dir, self.scored, self.log.print)
        return results

    def benchmark_training(self) -> dict:
        """``--mode training_benchmark``: the training step on the training data, timed."""
        self.dist.broadcast(self.state())
        stepper = self.training_stepper(self.task.train_dataset(), None)
        return benchmark.training(stepper, self.flags, self.profiler, self.log,
                                  self.task.config.LOG_NAMES, self.steps_per_epoch,
                                  self.ctx.global_batch_size)

    def benchmark_inference(self) -> dict:
        """``--mode inference_benchmark``: the serving computation (TF-TRT's with
        ``--use_tftrt``) on the inference data, every step timed."""
        f, task, exports = self.flags, self.task, self.exports
        data = read_batches(self.ctx.capabilities.on_device(inference.inference_dataset(
            task, exports.inference_streams, f.data_dir, f.batch_size)))
        infer, state = inference.benchmarked_function(
            task, exports, self.model, self.inference_model, data, f, self.dist.size,
            self.ctx.precision.xla, self.log, self.export_module if f.use_tftrt else None)
        stepper = InferStepper(infer, data, lambda b: inference.inference_inputs(exports, b),
                               task.items_in, state)
        return benchmark.inference(stepper, f, self.profiler, self.log, task.config.LOG_NAMES,
                                   self.steps_per_epoch)

    def predict(self, paths) -> dict:
        self.restore(required=True)
        return inference.predict(self.exports, self.inference_model(), paths, self.dist, self.log,
                                 self.flags.results_dir,
                                 loop.epoch_of(self.step, self.steps_per_epoch))

    def export(self, export_dir: str) -> None:
        if self.dist.is_chief:  # what the weights scored: this run's evaluation, else the step's
            f = self.flags
            export.export(self.export_module, export_dir, export.writes_onnx(
                self.exports.export, f.export_onnx, f.export_onnx_int8, f.export_triton),
                self.log.print, f.export_onnx_int8, f.export_triton, f.triton_replace,
                self.scored or scores_at(f.model_dir, self.step))
