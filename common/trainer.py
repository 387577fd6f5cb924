"""The train / evaluate / predict / benchmark loops, written once for every model.

One step does, in this order: forward -> loss (float32) -> loss scale (float16 only) ->
gradients, averaged over the step's ``--batch_chunk`` micro-batches -> allreduce across ranks
-> unscale, skip if not finite, clip, apply (the Keras ``LossScaleOptimizer`` and the
optimizer's own clipping) -> step += 1. A stateful task's state (Transformer-XL's memory) goes
into each micro-batch's forward pass and its next value comes out of the step. With ``--xla``
the computation is compiled with ``jit_compile``; Horovod's allreduce stays outside the
compiled parts because its ops have no XLA kernels on a CPU build.
"""
from __future__ import annotations

import contextlib
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

from common import benchmark, checkpoints, onnx_export, precision, profiling, tftrt
from common.errors import DataError, TrainingError, UsageError, one_line
from common.graceful_stop import GracefulStop
from common.input_errors import batches
from common.nonfinite import NonFiniteGuard, first_non_finite
from common.task import RunContext, Task

# Steps between the ranks' checks for a stop request under Horovod (besides the sync points).
STOP_CHECK_EVERY = 10


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

    @contextlib.contextmanager
    def paused(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._excluded += time.perf_counter() - t0


INFERENCE_MODES = ("evaluate", "predict", "inference_benchmark")  # the runs that only infer


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
        self.metrics = list(task.eval_metrics())
        # The optimizer is saved without its loss-scale wrapper, so any precision resumes any other.
        # The optimizer without its loss-scale wrapper: what checkpoints save and logs describe.
        self.inner_optimizer = (self.optimizer.inner_optimizer if self.loss_scaled
                                else self.optimizer)
        loss_scale = ({"dynamic_scale": self.optimizer.dynamic_scale,
                       "step_counter": self.optimizer.step_counter} if self.loss_scaled else None)
        self.checkpoints = checkpoints.CheckpointStore(
            self.flags.model_dir, {"model": self.model, "optimizer": self.inner_optimizer,
                                   "global_step": self.global_step},
            loss_scale, keep=self.flags.keep_checkpoints, log=self.log.print)
        if self.flags.mode in ("train", "train_and_evaluate"):
            # A checkpoint directory that is a file, read-only or full stops the run now, not at
            # the first save an epoch later; so do leftovers that need cleaning first.
            need = int(1.1 * checkpoints.nbytes(self._state())) + (1 << 20)
            self.dist.on_chief(lambda: (
                checkpoints.check_output_dir(self.flags.model_dir, "--model_dir", need,
                                             "a checkpoint needs"),
                self.checkpoints.clean_leftovers()), "checking --model_dir")
        if self.flags.export_dir:  # refused now, not after the training it would follow
            need = int(1.1 * checkpoints.nbytes(self.model.variables)) + (1 << 20)
            self.dist.on_chief(lambda: checkpoints.check_output_dir(
                self.flags.export_dir, "--export_dir", need, "the export needs"),
                "checking --export_dir")
        self._train_step = None
        self._eval_step = None
        self._eval_data = None  # one evaluation input pipeline per run
        self._compute_dtype_model = None
        self.profiler = profiling.StepProfiler(
            self.flags.profile, os.path.join(self.flags.results_dir, "tensorboard"), self.log,
            enabled=self.dist.is_chief)
        self.log.print(f"{task.name}: {count_params(self.model.trainable_variables):,} trainable "
                       f"parameters, {count_params(self.model.variables):,} in all")

    # --- state ----------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def _state(self):
        return list(self.model.variables) + list(self.optimizer.variables) + [self.global_step]

    def restore(self, required: bool = False) -> str | None:
        """Rank 0 restores the newest readable checkpoint; then every rank takes rank 0's state.
        A training run moves unreadable newer checkpoints aside (common/checkpoints.py)."""
        training = self.flags.mode in ("train", "train_and_evaluate")
        path = self.dist.on_chief(lambda: self.checkpoints.restore(required, quarantine=training),
                                  "restoring the checkpoint")
        if path:
            bad = first_non_finite(self._state())
            if bad:
                raise DataError(f"checkpoint {path} holds non-finite values ({bad}): resume from "
                                "an earlier checkpoint (move this one away) or start afresh")
            self.log.print(f"restored {path} at step {self.step}")
        self.dist.broadcast(self._state())
        return path

    def save(self) -> str | None:
        """Rank 0 saves, unless a weight is not finite; a failed save (a full disk) stops every
        rank with one line."""
        def save():
            bad = first_non_finite(self._state())
            if bad:
                raise TrainingError(f"{bad} is not finite at step {self.step}; stopped without "
                                    f"saving (last checkpoint: {self.checkpoints.latest})")
            return self.checkpoints.save(self.step)
        return self.dist.on_chief(save, "saving a checkpoint")

    # --- compiled steps -------------------------------------------------------------------
    def _build_train_step(self):
        model, opt, task, xla = self.model, self.optimizer, self.task, self.ctx.precision.xla
        fp16_allreduce = self.flags.fp16_allreduce

        def gradients(micro_batches, states):
            """Mean loss and mean gradients over the step's micro-batches (--batch_chunk), and
            each micro-batch's next state."""
            total, acc, new_states = 0.0, None, []
            for batch, state in zip(micro_batches, states):  # unrolled: k is fixed for the run
                with tf.GradientTape() as tape:
                    loss, state = task.train_loss(model, batch, state)
                    regularization = task.regularization(model)
                    if regularization is not None:
                        loss += regularization
                    scaled = opt.scale_loss(loss) if self.loss_scaled else loss
                grads = tape.gradient(scaled, model.trainable_variables)
                acc = grads if acc is None else [
                    a if g is None else g if a is None else a + g for a, g in zip(acc, grads)]
                total += loss
                new_states.append(state)
            # Sparse gradients (an embedding lookup's) become dense, as Horovod's sparse_as_dense:
            # one fused allreduce of dense tensors, and clipping and the optimizer see one form.
            acc = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in acc]
            k = len(micro_batches)
            if k > 1:
                acc = [None if g is None else g / k for g in acc]
            return total / k, acc, tuple(new_states)

        guard, variables = self.guard, model.trainable_variables
        dynamic_scale = self.loss_scaled and not isinstance(opt, precision.FixedLossScaleOptimizer)

        def update(grads, finite):
            """Applies the step when ``finite`` (the loss-scale optimizer lowers its scale
            instead), by the one decision ``guard.finite`` made."""
            if self.loss_scaled:
                opt.finite = finite
                try:
                    opt.apply(grads, variables)
                finally:
                    opt.finite = None
            else:
                def apply():
                    opt.apply(grads, variables)
                    return tf.constant(True)
                tf.cond(finite, apply, lambda: tf.constant(False))
            return finite

        # On a GPU the update is compiled by XLA in every run: its skip (a tf.cond) then runs on
        # the device, where a TensorFlow cond would wait on the host for the GPU to compute
        # its predicate, so that no step could be queued behind the current one.
        update_xla = xla or self.dist.devices.gpu
        if not (xla or update_xla or self.dist.enabled):  # one graph
            gradients_c, update_c = gradients, update
        else:
            # Compiled apart: Horovod's allreduce has no XLA kernel, and XLA compiles an
            # update inside the skip's tf.cond about twice as slowly as the update alone.
            gradients_c = tf.function(gradients, jit_compile=xla)
            update_c = tf.function(update, jit_compile=update_xla)

        @tf.function
        def step(micro_batches, states):
            micro_batches = tuple(task.prepare_train_batch(b) for b in micro_batches)
            loss, grads, states = gradients_c(micro_batches, states)
            grads = self.dist.allreduce_gradients(grads, fp16_compression=fp16_allreduce)
            # Every rank decides alike: these are the allreduced gradients.
            finite, first = guard.finite(grads)
            update_c(grads, finite)
            counted = None
            if dynamic_scale:  # an overflow counts once the scale is spent, or the loss is not
                counted = tf.logical_or(tf.logical_not(tf.math.is_finite(loss)),
                                        opt.dynamic_scale < 1.0)
            guard.record(finite, first, self.global_step + 1, counted)
            self.global_step.assign_add(1)
            return loss, states
        step.xla_parts = (gradients_c, update_c) if xla else ()  # for tests and HLO dumps
        step.update = update_c
        return step

    def _step_batches(self, data) -> tuple:
        """The micro-batches of one optimizer step: --batch_chunk consecutive batches."""
        try:
            return tuple(next(data) for _ in range(self.flags.batch_chunk))
        except (StopIteration, RuntimeError) as e:  # a generator's StopIteration: RuntimeError
            if isinstance(e, RuntimeError) and not isinstance(e.__cause__, StopIteration):
                raise
            raise DataError("the training data gave no batch: the training split is empty or "
                            f"smaller than one batch (--batch_size {self.flags.batch_size})"
                            ) from None

    def _initial_train_states(self) -> tuple:
        """Each micro-batch's starting state (all None for a stateless model)."""
        return tuple(self.task.initial_state(self.model, "train")
                     for _ in range(self.flags.batch_chunk))

    def _global_items(self, micro_batches) -> int:
        """Items one optimizer step processes over every rank (for throughput)."""
        return sum(self.task.items_in(b) for b in micro_batches) * self.dist.size

    def _compiled_train_step(self):
        """The train step, traced once and reused by training and the benchmark."""
        if self._train_step is None:
            self._train_step = self._build_train_step()
        return self._train_step

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

        The host waits for the device only at sync points: a logged step (``--display_every``),
        the end of the warm-up, a save, an evaluation, a stop request and the last step. There it
        reads the loss and the non-finite counters (``common/nonfinite.py``); a checkpoint is
        saved before an evaluation, so that a failing evaluation never costs the steps before
        it."""
        f, unit = self.flags, self.task.item_unit
        self.restore()
        start = self.step
        summary = {"start_step": start}
        if start >= total_steps:
            self.log.print(f"already trained to step {start} (target {total_steps}): nothing to do")
            return {**summary, "final_step": start}
        if evaluate:
            self.check_eval_inputs()
        step_fn = self._compiled_train_step()
        data = batches(self._on_device(self.task.train_dataset_at(start)),
                       lambda: self.task.locate_bad_record("train"))
        spe = self.steps_per_epoch
        states, loss, eval_results, skipped = None, None, {}, 0
        # Throughput: the items and wall time between sync points after the warm-up (all steps
        # when the run is no longer than the warm-up), without the time saves and evaluations
        # take; the display window likewise.
        timed = _Timer(active=f.warmup_steps == 0 or total_steps - start <= f.warmup_steps)
        window = _Timer(active=True)
        with GracefulStop() as stop:
            for step in range(start + 1, total_steps + 1):
                if states is None or (step - 1) % spe == 0:  # a run's or an epoch's first step
                    states = self._initial_train_states()
                micro = self._step_batches(data)
                self.profiler.before(step)
                states_in = states
                loss, states = step_fn(micro, states)  # no wait for the device here
                items = self._global_items(micro)
                timed.add(items)
                window.add(items)
                epoch = (step - 1) // spe + 1
                end_of_epoch = step % spe == 0
                last = step == total_steps
                display = step % f.display_every == 0 or last
                do_eval = evaluate and (last or (end_of_epoch and f.eval_at_epoch_end)
                                        or (f.eval_every and step % f.eval_every == 0))
                do_save = (end_of_epoch or last
                           or (f.save_checkpoint_steps and step % f.save_checkpoint_steps == 0))
                warmed_up = step - start == f.warmup_steps
                # Under Horovod, agreeing on a stop is an allreduce: it happens at steps every
                # rank knows (sync points and every STOP_CHECK_EVERY steps), not at every step.
                stopping = ((not self.dist.enabled or display or do_eval or do_save or warmed_up
                             or step % STOP_CHECK_EVERY == 0) and stop.should_stop(self.dist))
                profiled = self.profiler.stops_at(step)
                if not (display or do_eval or do_save or stopping or warmed_up or profiled):
                    continue
                loss = float(loss)  # the sync point: waits for the device
                self.profiler.after(step, step_fn, (micro, states_in), final=last or stopping)
                # A run that ends on non-finite steps stops with the error, except under float16
                # loss scaling, where a skipped step is how the scale finds its level.
                self._check_inputs("train")
                skipped = self.guard.check(step, loss, self.checkpoints.latest, self._loss_scale(),
                                           last=last and not self.loss_scaled)
                if warmed_up and not timed.active:
                    timed = _Timer(active=True)
                if display:
                    extra = {"skipped_steps": skipped} if skipped else {}
                    self.log.log((epoch, step), {"loss": loss, **self._step_logs(), **extra,
                                                 f"{unit}_per_s": window.rate()},
                                 progress=(step, total_steps), tb_step=step)
                    window = _Timer(active=True)
                saved = None
                if do_save:
                    with timed.paused(), window.paused():
                        saved = self.save()
                if do_eval:
                    with timed.paused(), window.paused():
                        eval_results = self.evaluate(epoch=epoch)
                if stopping:  # every rank calls save() once at this step, or none does
                    path = saved if do_save else self.save()
                    self.log.print(f"{stop.requested_by or 'a signal on another rank'}: stopped at "
                                   f"step {step}, checkpoint {path}; run again to resume")
                    summary["stopped_by_signal"] = True
                    break
        summary.update(final_step=self.step, final_loss=loss, epochs=self.step / spe)
        if skipped:
            summary["skipped_steps"] = skipped
            self.log.print(f"{skipped} step(s) had non-finite gradients and were not applied")
        if timed.seconds:
            summary[f"train_{unit}_per_s"] = timed.rate()
        summary.update(eval_results)
        summary.update(self.profiler.report)
        return summary

    def _loss_scale(self) -> float | None:
        return float(self.optimizer.dynamic_scale.numpy()) if self.loss_scaled else None

    # --- evaluation -----------------------------------------------------------------------
    def inference_model(self) -> keras.Model:
        """The model that evaluation, prediction and the inference benchmark run. In a run that
        only infers (``--mode evaluate``, ``predict``, ``inference_benchmark``) under AMP, for a
        task that allows it (``Task.infers_in_compute_dtype``): a copy holding the weights in
        the compute dtype (``precision.compute_dtype_copy``), made once, after the restore.
        Otherwise the model itself, float32 weights cast at every step under AMP."""
        p = self.ctx.precision
        if not (p.amp and self.task.infers_in_compute_dtype and
                self.flags.mode in INFERENCE_MODES):
            return self.model
        if self._compute_dtype_model is None:
            self._compute_dtype_model = precision.compute_dtype_copy(
                self.task.build_model, self.model, p.compute_dtype)
            self.log.print(f"inference on a copy of the model with {p.compute_dtype} weights "
                           "(no casts of float32 weights at each step)")
        return self._compute_dtype_model

    def inference_weights(self) -> str:
        """The weights' dtype that inference ran with: the summary records it."""
        return (self.ctx.precision.compute_dtype if self._compute_dtype_model is not None
                else "float32")

    def evaluate(self, epoch: int | None = None) -> dict:
        """One pass over every rank's evaluation data, by the task's form of evaluation: metrics
        that are sums, added up over ranks, or per-example outputs gathered from every rank and
        summarised once (``Task.gathers_eval_outputs``)."""
        if self.task.gathers_eval_outputs:
            results, items, seconds = self._evaluate_gathered()
        else:
            results, items, seconds = self._evaluate_summed()
        unit = self.task.item_unit
        results[f"eval_{unit}_per_s"] = items / seconds
        self.log.log((epoch or 0, self.step), results, tb_step=self.step, tb_prefix="eval")
        return results

    def _evaluate_summed(self) -> tuple[dict, int, float]:
        """Metrics whose variables are totals and counts: each rank updates its own over its
        shard (carrying a stateful model's state from batch to batch), then the variables are
        added up over ranks, which gives the global metrics."""
        task, model, metrics = self.task, self.inference_model(), self.metrics
        if self._eval_step is None:
            self._eval_step = tf.function(
                lambda batch, state: task.eval_update(model, batch, metrics, state),
                jit_compile=self.ctx.precision.xla)
        for m in metrics:
            m.reset_state()
        start, items, state = time.perf_counter(), 0, task.initial_state(model, "eval")
        for batch in self._eval_batches():
            state = self._eval_step(batch, state)
            items += task.items_in(batch)
        self._check_inputs("eval")
        seconds = time.perf_counter() - start
        total = self._total_eval_items(items)
        for m in metrics:
            for var, value in zip(m.variables, self.dist.sum([v.value for v in m.variables])):
                var.assign(value)
        results = {f"eval_{m.name}": float(m.result()) for m in metrics}
        return {**results, f"eval_{task.item_unit}": total}, items, seconds

    def _evaluate_gathered(self) -> tuple[dict, int, float]:
        """Per-example outputs: every rank's, in order, gathered; rank 0 summarises the whole
        split once (COCO AP) and every rank gets its results."""
        task, model = self.task, self.inference_model()
        if self._eval_step is None:
            # Only the forward pass goes to XLA: post-processing such as NMS has no XLA kernel.
            forward = tf.function(lambda x: model(x, training=False),
                                  jit_compile=self.ctx.precision.xla)
            self._eval_step = tf.function(
                lambda batch: task.eval_outputs(lambda x, training=False: forward(x), batch))
        start, items, outputs = time.perf_counter(), 0, []
        for batch in self._eval_batches():
            outputs.append({k: v.numpy() for k, v in self._eval_step(batch).items()})
            items += task.items_in(batch)
        seconds = time.perf_counter() - start
        total = self._total_eval_items(items)
        if self.dist.any(not outputs):  # every rank must take part in the gather
            raise DataError("a process got no evaluation examples: there are fewer "
                            "evaluation examples than processes")
        gathered = self.dist.allgather(
            {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]})
        results = self.dist.broadcast_object(
            {f"eval_{k}": v for k, v in task.summarize(gathered).items()}
            if self.dist.is_chief else None)
        return {**results, f"eval_{task.item_unit}": total}, items, seconds

    def check_eval_inputs(self) -> None:
        """Before the first step of ``train_and_evaluate``: one batch from every rank's shard,
        through the real pipeline, then the task's own checks of what the evaluation reads
        besides its batches (``Task.check_eval_inputs``). A missing, empty or unreadable split
        stops the run now instead of an epoch later."""
        first = next(self._eval_batches(), None)
        self.task.check_eval_inputs(first)
        items = 0 if first is None else self.task.items_in(first)
        del first
        total = int(self.dist.sum([tf.constant(items, tf.int64)])[0])
        if total == 0:
            raise DataError(f"the evaluation data is empty ({self.task.eval_data_hint()})")
        if self.task.gathers_eval_outputs and self.dist.any(items == 0):
            raise DataError("a process got no evaluation examples: there are fewer evaluation "
                            "examples than processes")

    def _eval_batches(self):
        if self._eval_data is None:
            self._eval_data = self._on_device(self.task.eval_dataset())
        return batches(self._eval_data, lambda: self.task.locate_bad_record("eval"))

    def _on_device(self, data):
        """tf.data batches, made on the host, copied to the GPU ahead of the step that reads
        them (``prefetch_to_device``) rather than inside it. DALI's (``dali.Served``) and
        synthetic batches (``task.Repeated``) are there already; on a CPU nothing moves."""
        if isinstance(data, tf.data.Dataset) and self.dist.devices.gpu:
            return data.apply(tf.data.experimental.prefetch_to_device(
                self.dist.devices.tf_device, buffer_size=2))
        return data

    def _check_inputs(self, split: str) -> None:
        """At a sync point: what the compiled steps found wrong in the batches (a label out of
        range), as one line naming the record where it can."""
        for check in self.task.input_checks():
            check.raise_if_bad(lambda: self.task.locate_bad_record(split))

    def _total_eval_items(self, items: int) -> int:
        """Items evaluated over every rank; an empty evaluation stops the run."""
        total = int(self.dist.sum([tf.constant(items, tf.int64)])[0])
        if total == 0:
            raise DataError("the evaluation data is empty")
        return total

    # --- benchmarks -----------------------------------------------------------------------
    def _benchmark_syncs(self, step: int) -> bool:
        """Whether the host waits for the device after ``step`` of a benchmark: a logged step,
        the end of the warm-up, the last step or the profiler's. Between sync points the host
        only dispatches steps."""
        f = self.flags
        return (step % f.display_every == 0 or step == f.num_iter or step == f.warmup_steps
                or self.profiler.stops_at(step))

    def benchmark_training(self) -> dict:
        """Steps on the training data as in ``train`` (the same compiled step), without saves
        or evaluations. The host waits for the device only at sync points
        (``_benchmark_syncs``), as training does, so throughput is measured over the windows
        between them after the warm-up (``common/benchmark.py``); a non-finite loss stops the
        run within a window, as in training."""
        f, unit = self.flags, self.task.item_unit
        step_fn = self._compiled_train_step()
        self.dist.broadcast(self._state())
        data = batches(self._on_device(self.task.train_dataset()),
                       lambda: self.task.locate_bad_record("train"))
        states = self._initial_train_states()
        clock = benchmark.Windows(f.warmup_steps)
        for i in range(1, f.num_iter + 1):
            micro = self._step_batches(data)
            self.profiler.before(i)
            states_in = states
            loss, states = step_fn(micro, states)  # no wait for the device here
            if not self._benchmark_syncs(i):
                continue
            loss = float(loss)  # the sync point: waits for the device
            clock.close(i)
            last = i == f.num_iter
            self.profiler.after(i, step_fn, (micro, states_in), final=last)
            self._check_inputs("train")
            self.guard.check(i, loss, self.checkpoints.latest, self._loss_scale(),
                             last=last and not self.loss_scaled)
            if i % f.display_every == 0 or last:
                self.log.log((0, i), {"loss": loss, f"{unit}_per_s": clock.rate(
                    self._global_items(micro)), "warmup": i <= f.warmup_steps},
                    progress=(i, f.num_iter), tb_step=i)
            clock.reopen()
        items_per_step = self._global_items(micro)
        return {**clock.summary(items_per_step, unit), "global_batch_size": items_per_step,
                **self.profiler.report}

    def benchmark_inference(self) -> dict:
        """The serving computation on the inference data, timed like ``benchmark_training``:
        the host reads a step's outputs only at sync points (``--display_every 1``: every step,
        for per-batch latency)."""
        f, unit = self.flags, self.task.item_unit
        model, task = self.model, self.task
        data = batches(self._on_device(task.inference_dataset()))
        if f.use_tftrt:
            if self.dist.size > 1:
                raise UsageError("--use_tftrt benchmarks one GPU: run it without "
                                 "mpirun/horovodrun")
            state = task.initial_state(model, "infer")
            infer = tftrt.benchmark_infer(task, model, f.results_dir, f.use_tftrt,
                                          task.inference_inputs(next(data)), state,
                                          log=self.log.print)
        else:
            model = self.inference_model()
            state = task.initial_state(model, "infer")
            infer = tf.function(lambda x, state: task.infer(model, x, state),
                                jit_compile=self.ctx.precision.xla)
        clock = benchmark.Windows(f.warmup_steps)
        for i in range(1, f.num_iter + 1):
            batch = next(data)
            inputs = task.inference_inputs(batch)
            self.profiler.before(i)
            state_in = state
            outputs, state = infer(inputs, state)  # no wait for the device here
            if not self._benchmark_syncs(i):
                continue
            tf.nest.map_structure(lambda t: t.numpy(), outputs)  # the sync point
            clock.close(i)
            self.profiler.after(i, infer, (inputs, state_in), final=i == f.num_iter)
            if i % f.display_every == 0 or i == f.num_iter:
                self.log.log((0, i), {f"{unit}_per_s": clock.rate(task.items_in(batch)),
                                      "warmup": i <= f.warmup_steps},
                             progress=(i, f.num_iter), tb_step=i)
            clock.reopen()
        return {**clock.summary(task.items_in(batch), unit),
                "batch_size": int(tf.nest.flatten(inputs)[0].shape[0]), **self.profiler.report}

    # --- inference ------------------------------------------------------------------------
    def predict(self, paths) -> dict:
        """Every file's predictions, in order, into ``predictions.json`` (written whole or not
        at all). A file that cannot be read is reported, recorded with its error and skipped;
        the run fails only when no file can be read."""
        self.restore(required=True)
        records, failed = [], []
        for n, path in enumerate(paths, 1):
            try:
                found = self.task.predict_file(self.inference_model(), path)
            except (DataError, OSError, tf.errors.OpError) as e:
                why = str(e) if isinstance(e, DataError) else f"{path}: {one_line(str(e))}"
                failed.append(why)
                found = [{"file": path, "error": why}]
                self.log.print(f"skipped {path}: {why}")
            for r in found:
                self.log.log((0, len(records)), r)
                records.append(r)
            if len(paths) > 1:
                self.log.print(f"predict: {n}/{len(paths)} files")
        if len(failed) == len(paths):
            raise DataError(failed[0] if len(paths) == 1 else
                            f"none of the {len(paths)} files could be read (first: {failed[0]})")
        if self.dist.is_chief:
            out = os.path.join(self.flags.results_dir, "predictions.json")
            checkpoints.write_atomically(out, json.dumps(records, indent=1))
            self.log.print(f"wrote {len(records) - len(failed)} predictions to {out}"
                           + (f" ({len(failed)} file(s) skipped)" if failed else ""))
        return {"predictions": len(records) - len(failed), "skipped_files": len(failed)}

    def export(self, export_dir: str) -> None:
        if not self.dist.is_chief:
            return
        self.task.export(self.model, export_dir)
        self.log.print(f"exported a SavedModel to {export_dir}")
        if self.flags.export_onnx:
            for path in onnx_export.export_task(self.task, self.model, export_dir):
                self.log.print(f"exported ONNX (opset {onnx_export.OPSET}) to {path}")
