"""The training loop, written once for every model, and the Trainer every mode runs on.

A ``Trainer`` builds the task's model and optimizer (with loss scaling for float16), restores
and saves checkpoints, and trains: the compiled step is ``common/train_step.py``, the sync
points ``common/sync.py``, evaluation ``common/evaluation.py``, the benchmark modes
``common/benchmark.py``, prediction and export ``common/inference.py``. ``train`` reads as the
loop it is: take a step's batches, dispatch the step, and only at a sync point wait for the
device, check, log, save, evaluate, or stop.
"""
from __future__ import annotations

import contextlib
import os
import time

import keras
import numpy as np
import tensorflow as tf

from common import (
    benchmark,
    checkpoint_settings,
    checkpoints,
    files,
    inference,
    precision,
    profiling,
    sync,
    train_step,
)
from common.errors import DataError, TrainingError
from common.evaluation import Evaluator
from common.graceful_stop import GracefulStop
from common.input_errors import batches
from common.nonfinite import NonFiniteGuard, first_non_finite
from common.task import RunContext, Task

INFERENCE_MODES = inference.INFERENCE_MODES


def count_params(variables) -> int:
    return int(sum(np.prod(v.shape) for v in variables))


class _Timer:
    """Items and wall time since it was made (or since ``active``), excluding ``paused`` blocks."""

    def __init__(self, active: bool):
        self.active, self.items, self._excluded = active, 0, 0.0
        self._start = time.perf_counter()

    def add(self, items: int) -> None:
        if self.active:
            self.items += items

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._start - self._excluded if self.active else 0.0

    def rate(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    def mark(self) -> tuple:
        return self, self.items, self.seconds

    def exclude_since(self, mark: tuple) -> int:
        """Leaves out the items and time counted since ``mark`` (a ``mark()`` of this timer, or
        of one it replaced: then everything it counted); returns the items left out."""
        _, items, seconds = mark if mark[0] is self else (self, 0, 0.0)
        if not self.active:
            return 0
        self._excluded += self.seconds - seconds
        left_out, self.items = self.items - items, items
        return left_out

    @contextlib.contextmanager
    def paused(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._excluded += time.perf_counter() - t0


class Trainer:
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
        self.checkpoints = checkpoints.CheckpointStore(
            self.flags.model_dir, {"model": self.model, "optimizer": self.inner_optimizer,
                                   "global_step": self.global_step},
            loss_scale, keep=self.flags.keep_checkpoints, log=self.log.print)
        self._check_output_dirs()
        self._train_step = None
        self.inference_model = inference.InferenceModel(task, self.model, ctx)
        self.evaluator = Evaluator(task, ctx, self.inference_model, self.on_device,
                                   self.check_inputs)
        self.profiler = profiling.StepProfiler(
            self.flags.profile, os.path.join(self.flags.results_dir, "tensorboard"), self.log,
            enabled=self.dist.is_chief)
        self.log.print(f"{task.name}: {count_params(self.model.trainable_variables):,} trainable "
                       f"parameters, {count_params(self.model.variables):,} in all")

    def _check_output_dirs(self) -> None:
        """A checkpoint or export directory that is a file, read-only or full stops the run
        now, not at the first save an epoch later (or after the training an export follows);
        so do leftovers that need cleaning first."""
        f = self.flags
        if f.mode in ("train", "train_and_evaluate"):
            need = int(1.1 * checkpoints.nbytes(self.state())) + (1 << 20)
            self.dist.on_chief(lambda: (
                files.check_output_dir(f.model_dir, "--model_dir", need, "a checkpoint needs"),
                self.checkpoints.clean_leftovers()), "checking --model_dir")
        if f.export_dir:  # its room measured by a trial export (inference.export_bytes)
            def check_export_dir():
                files.check_output_dir(f.export_dir, "--export_dir", 1 << 20, "the export needs")
                need = inference.export_bytes(self.task, self.model, f.export_dir,
                                              f.export_onnx or f.export_onnx_int8,
                                              f.export_onnx_int8, self.log.print)
                files.check_output_dir(f.export_dir, "--export_dir", need, "the export needs")
                if f.export_onnx_int8:  # a bad record found now, not after the training
                    for _ in self.task.calibration_batches():
                        pass
            self.dist.on_chief(check_export_dir, "checking --export_dir")

    # --- state ----------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def state(self):
        return list(self.model.variables) + list(self.optimizer.variables) + [self.global_step]

    def restore(self, required: bool = False) -> str | None:
        """Rank 0 restores the newest readable checkpoint; then every rank takes rank 0's state.
        A training run moves unreadable newer checkpoints aside (common/checkpoints.py). A
        training run with nothing to resume starts from --finetune_checkpoint's weights."""
        training = self.flags.mode in ("train", "train_and_evaluate")

        def restore():
            self._check_facts(self.flags.model_dir, f"the checkpoint in --model_dir "
                                                    f"{self.flags.model_dir}")
            path = self.checkpoints.restore(required, quarantine=training)
            if path is None and training and self.flags.finetune_checkpoint:
                self._finetune(self.flags.finetune_checkpoint)
            elif path and self.flags.finetune_checkpoint:
                self.log.print(f"--finetune_checkpoint {self.flags.finetune_checkpoint} not "
                               f"read: resuming the run in {self.flags.model_dir}")
            return path
        path = self.dist.on_chief(restore, "restoring the checkpoint")
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
        (``record_settings``); a failed save (a full disk) stops every rank with one line."""
        def save():
            bad = first_non_finite(self.state())
            if bad:
                raise TrainingError(f"{bad} is not finite at step {self.step}; stopped without "
                                    f"saving (last checkpoint: {self.checkpoints.latest})")
            path = self.checkpoints.save(self.step)
            self.record_settings(self.flags.model_dir)
            return path
        return self.dist.on_chief(save, "saving a checkpoint")

    def record_settings(self, directory: str) -> None:
        """``settings.json`` (``common/checkpoint_settings.py``) and the task's assets (its
        class names) in a checkpoint directory."""
        values = {name: getattr(self.flags, name) for name in self.task.checkpoint_flags}
        checkpoint_settings.write(directory, self.task.name,
                                  {**values, **self.task.checkpoint_facts()})
        for name, source in self.task.checkpoint_assets().items():
            target = os.path.join(directory, name)
            with open(source, "rb") as f:
                data = f.read()
            if not os.path.exists(target) or open(target, "rb").read() != data:
                files.write_atomically(target, data)

    def _check_facts(self, path: str, source: str) -> None:
        """The data-derived settings (a vocabulary) against those of the checkpoint at
        ``path``, when it has a record."""
        found = checkpoint_settings.read(path) if checkpoints.on_disk(
            checkpoint_settings.directory_of(path)) else None
        if found:
            checkpoint_settings.compare(found, self.task.checkpoint_facts(), source,
                                        self.task.checkpoint_fact_sources())

    def _finetune(self, path: str) -> None:
        """The model's weights from the checkpoint at ``path``; step, optimizer and schedule
        start afresh, and so do the task's heads whose shapes differ (with a line)."""
        flag = f"--finetune_checkpoint {path}"
        prefix = checkpoints.resolve(path, "--finetune_checkpoint")
        found = checkpoint_settings.read(prefix)
        self._check_facts(prefix, flag)
        source = self.task.build_model_like(found["settings"] if found else {})
        fresh = checkpoints.load_weights(self.model, source, prefix, flag,
                                         self.task.finetune_heads, self.log.print)
        self.log.print(f"fine-tuning from {prefix}: its weights, step 0, a fresh optimizer and "
                       "schedule")
        for layer in fresh:
            self.log.print(f"{layer} starts afresh: its shape in the checkpoint differs (another "
                           "number of classes)")

    # --- what the loops share -------------------------------------------------------------
    def build_train_step(self):
        return train_step.build(self.task, self.model, self.optimizer, self.guard,
                                self.global_step, self.dist, self.ctx.precision.xla,
                                self.flags.fp16_allreduce, self.ctx.capabilities.update_compiled)

    def compiled_train_step(self):
        """The train step, traced once and reused by training and the benchmark."""
        if self._train_step is None:
            self._train_step = self.build_train_step()
        return self._train_step

    def step_batches(self, data) -> tuple:
        """The micro-batches of one optimizer step: --batch_chunk consecutive batches."""
        try:
            return tuple(next(data) for _ in range(self.flags.batch_chunk))
        except (StopIteration, RuntimeError) as e:  # a generator's StopIteration: RuntimeError
            if isinstance(e, RuntimeError) and not isinstance(e.__cause__, StopIteration):
                raise
            raise DataError("the training data gave no batch: the training split is empty or "
                            f"smaller than one batch (--batch_size {self.flags.batch_size})"
                            ) from None

    def initial_train_states(self) -> tuple:
        """Each micro-batch's starting state (all None for a stateless model)."""
        return tuple(self.task.initial_state(self.model, "train")
                     for _ in range(self.flags.batch_chunk))

    def global_items(self, micro_batches) -> int:
        """Items one optimizer step processes over every rank (for throughput)."""
        return sum(self.task.items_in(b) for b in micro_batches) * self.dist.size

    def on_device(self, data):
        """tf.data batches, made on the host, copied to the GPU ahead of the step that reads
        them (``prefetch_to_device``) rather than inside it. DALI's (``dali.Served``) and
        synthetic batches (``task.Repeated``) are there already; on a CPU nothing moves."""
        if isinstance(data, tf.data.Dataset) and self.ctx.capabilities.gpu:
            return data.apply(tf.data.experimental.prefetch_to_device(
                self.dist.devices.tf_device, buffer_size=2))
        return data

    def check_inputs(self, split: str) -> None:
        """At a sync point: what the compiled steps found wrong in the batches (a label out of
        range), as one line naming the record where it can."""
        for check in self.task.input_checks():
            check.raise_if_bad(lambda: self.task.locate_bad_record(split))

    def loss_scale(self) -> float | None:
        return float(self.optimizer.dynamic_scale.numpy()) if self.loss_scaled else None

    def _step_logs(self) -> dict:
        out = {"lr": float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))}
        if self.loss_scaled:
            out["loss_scale"] = float(self.optimizer.dynamic_scale.numpy())
        return out

    def effective_settings(self) -> dict:
        """What this run derived from its flags, data and configuration, by name, for the
        PARAMETER record: the global batch, the epoch and run lengths in steps, the schedule's
        peak learning rate and warm-up (after scaling), and the task's own (``Task.
        effective_settings``), which replace the flags' values of the same names."""
        # A schedule comes serialized: its config.
        lr = self.inner_optimizer.get_config()["learning_rate"]
        schedule = lr["config"] if isinstance(lr, dict) else {"peak": float(lr)}
        out = {"global_batch_size": self.ctx.global_batch_size,
               "steps_per_epoch": self.steps_per_epoch, "total_steps": self.total_steps(),
               "lr_peak": schedule.get("peak")}
        if "warmup_steps" in schedule:
            out["lr_warmup_steps"] = schedule["warmup_steps"]
        return {**out, **self.task.effective_settings()}

    # --- training -------------------------------------------------------------------------
    def total_steps(self) -> int:
        f = self.flags
        return f.num_iter * self.steps_per_epoch if f.iter_unit == "epoch" else f.num_iter

    def train(self, total_steps: int, evaluate: bool = False) -> dict:
        """Trains until ``global_step == total_steps``, resuming from the latest checkpoint.

        The host waits for the device only at sync points (``common/sync.py``): a logged step,
        the end of the warm-up, a save, an evaluation, a stop request and the last step. There
        it reads the loss and the device-side counters (non-finite steps, bad inputs); a
        checkpoint is saved before an evaluation, so that a failing evaluation never costs the
        steps before it."""
        f, unit, spe = self.flags, self.task.item_unit, self.steps_per_epoch
        self.restore()
        start = self.step
        summary = {"start_step": start}
        if start >= total_steps:
            self.log.print(f"already trained to step {start} (target {total_steps}): nothing to do")
            return {**summary, "final_step": start}
        if evaluate:
            self.evaluator.check_before_training()
        self.profiler.plan(start + 1, total_steps)
        step_fn = self.compiled_train_step()
        data = batches(self.on_device(self.task.train_dataset_at(start)),
                       lambda: self.task.locate_bad_record("train"))
        states, loss, eval_results, skipped = None, None, {}, 0
        # Throughput: the items and wall time between sync points after the warm-up (all steps
        # when the run is no longer than the warm-up), without the time saves and evaluations
        # take; the display window likewise.
        # A run no longer than the warm-up is timed whole, compilation included: its summary
        # says so. Profiled steps are left out (the profiler's first step follows a sync point).
        short = 0 < f.warmup_steps and total_steps - start <= f.warmup_steps
        timed = _Timer(active=f.warmup_steps == 0 or short)
        window = _Timer(active=True)
        sync_mark = profile_mark = timed.mark()
        profiled_out = 0  # timed items left out as profiled
        with GracefulStop() as stop:
            for step in range(start + 1, total_steps + 1):
                if states is None or (step - 1) % spe == 0:  # a run's or an epoch's first step
                    states = self.initial_train_states()
                micro = self.step_batches(data)
                if not self.profiler.active:
                    self.profiler.before(step)
                    if self.profiler.active:
                        profile_mark = sync_mark
                states_in = states
                loss, states = step_fn(micro, states)  # no wait for the device here
                items = self.global_items(micro)
                timed.add(items)
                window.add(items)
                epoch = (step - 1) // spe + 1
                ev = sync.events(step, f, start=start, total=total_steps, steps_per_epoch=spe,
                                 evaluate=evaluate, profiler=self.profiler)
                stopping = (not self.dist.enabled or ev.vote) and stop.should_stop(self.dist)
                if not (ev.sync or stopping):
                    continue
                loss = float(loss)  # the sync point: waits for the device
                if self.profiler.active:
                    self.profiler.after(step, step_fn, (micro, states_in),
                                        final=ev.last or stopping)
                    if not self.profiler.active:
                        profiled_out = timed.exclude_since(profile_mark)
                self.check_inputs("train")
                # A run that ends on non-finite steps stops with the error, except under float16
                # loss scaling, where a skipped step is how the scale finds its level.
                skipped = self.guard.check(step, loss, self.checkpoints.latest, self.loss_scale(),
                                           last=ev.last and not self.loss_scaled)
                if ev.warmed_up and not timed.active:
                    timed = _Timer(active=True)
                if ev.display:
                    extra = {"skipped_steps": skipped} if skipped else {}
                    self.log.log((epoch, step), {"loss": loss, **self._step_logs(), **extra,
                                                 f"{unit}_per_s": window.rate()},
                                 progress=(step, total_steps), tb_step=step)
                    window = _Timer(active=True)
                saved = None
                if ev.save:
                    with timed.paused(), window.paused():
                        saved = self.save()
                if ev.evaluate:
                    with timed.paused(), window.paused():
                        eval_results = self.evaluate(epoch=epoch)
                sync_mark = timed.mark()
                if stopping:  # every rank calls save() once at this step, or none does
                    path = saved if ev.save else self.save()
                    self.log.print(f"{stop.requested_by or 'a signal on another rank'}: stopped at "
                                   f"step {step}, checkpoint {path}; run again to resume")
                    summary["stopped_by_signal"] = True
                    break
        summary.update(final_step=self.step, final_loss=loss, epochs=self.step / spe)
        if skipped:
            summary["skipped_steps"] = skipped
            self.log.print(f"{skipped} step(s) had non-finite gradients and were not applied")
        if timed.items and timed.seconds:
            summary[f"train_{unit}_per_s"] = timed.rate()
            if short:
                summary["throughput_includes_compilation"] = True
                self.log.print(f"train_{unit}_per_s includes start-up and compilation: the run "
                               f"has no more steps than --warmup_steps ({f.warmup_steps})")
        if profiled_out:
            summary["throughput_excludes_profiled_steps"] = self.flags.profile
        summary.update(eval_results)
        summary.update(self.profiler.report)
        return summary

    # --- the other modes ------------------------------------------------------------------
    def evaluate(self, epoch: int | None = None) -> dict:
        """One pass over every rank's evaluation data (``common/evaluation.py``)."""
        return self.evaluator.evaluate(self.step, epoch)

    def benchmark_training(self) -> dict:
        return benchmark.training(self)

    def benchmark_inference(self) -> dict:
        return benchmark.inference(self)

    def inference_weights(self) -> str:
        return self.inference_model.weights_dtype

    def predict(self, paths) -> dict:
        self.restore(required=True)
        return inference.predict(self.task, self.inference_model(), paths, self.dist, self.log,
                                 self.flags.results_dir)

    def export(self, export_dir: str) -> None:
        if self.dist.is_chief:
            f = self.flags
            inference.export(self.task, self.model, export_dir, f.export_onnx or f.export_onnx_int8,
                             self.log, int8=f.export_onnx_int8)
