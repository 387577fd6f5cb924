"""The benchmark modes (``training_benchmark``, ``inference_benchmark``): one timed loop, and
throughput and latency statistics from its timed windows.

The benchmark loops wait for the device only at sync points (every ``--display_every`` steps,
the end of the warm-up, the last step), as training does, so what is timed is a window: the wall
time of the steps dispatched between two sync points. Latency is each window's mean step time,
counted once per step of the window: with ``--display_every 1`` every step is its own window and
the percentiles are those of single steps.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from common import sync, tftrt
from common.errors import UsageError
from common.input_errors import batches


def from_windows(windows: Sequence[tuple[float, int]], items_per_step: int, unit: str) -> dict:
    """``windows``: (seconds, steps) of each timed window, warm-up excluded."""
    if not windows or sum(n for _, n in windows) == 0:
        raise ValueError("no timed steps: --num_iter must exceed --warmup_steps")
    seconds = np.asarray([s for s, _ in windows], dtype=np.float64)
    steps = np.asarray([n for _, n in windows], dtype=np.int64)
    step_ms = np.repeat(1000.0 * seconds / np.maximum(steps, 1), steps)
    out = {
        f"throughput_{unit}_per_s": items_per_step * steps.sum() / seconds.sum(),
        f"mean_step_throughput_{unit}_per_s": float(np.mean(items_per_step * 1000.0 / step_ms)),
        "timed_steps": int(steps.sum()),
        "timed_seconds": float(seconds.sum()),
        "timed_windows": len(windows),
        "latency_avg_ms": float(step_ms.mean()),
    }
    for p in (50, 90, 95, 99):
        out[f"latency_p{p}_ms"] = float(np.percentile(step_ms, p))
    return out


class Windows:
    """A benchmark loop's timed windows: the steps dispatched between two host sync points and
    the wall time from the end of one sync point's own work (logging, profiling) to the next
    sync. Windows that start before the end of the warm-up are not timed."""

    def __init__(self, warmup_steps: int):
        self.warmup_steps, self.timed = warmup_steps, []  # timed: (seconds, steps) per window
        self.profiled_out = 0  # steps after the warm-up left out because they were profiled
        self.last = None  # the latest window, timed or not
        self._step, self._start = 0, time.perf_counter()

    def close(self, step: int, profiled: bool = False) -> None:
        """At a sync point, right after the host waited for the device at ``step``; a window
        with ``profiled`` steps is not timed (the profiler slows them)."""
        self.last = (time.perf_counter() - self._start, step - self._step)
        if self._step >= self.warmup_steps:
            if profiled:
                self.profiled_out += self.last[1]
            else:
                self.timed.append(self.last)
        self._step = step

    def reopen(self) -> None:
        """After the sync point's own work: the next window starts now."""
        self._start = time.perf_counter()

    def rate(self, items_per_step: int) -> float:
        """Items/s of the latest window."""
        seconds, steps = self.last
        return items_per_step * steps / seconds if seconds > 0 else 0.0

    def summary(self, items_per_step: int, unit: str, profile: str | None = None) -> dict:
        out = from_windows(self.timed, items_per_step, unit)
        if self.profiled_out:
            out["throughput_excludes_profiled_steps"] = profile
        return out


def timed_loop(trainer, num_iter: int, dispatch, read, on_sync) -> Windows:
    """The loop of both benchmark modes: ``dispatch(i)`` takes step i's batch, starts the
    profiler where it starts (``profiler.before``), runs the step without waiting for the
    device and returns what the profiler and ``read`` need (``(fn, args, outputs)``); at a
    sync point (``common.sync``: a logged step, the end of the warm-up, the last step, the
    profiler's first and last) ``read(outputs)`` waits for the device, the window closes, and
    ``on_sync(i, outputs, clock)`` checks and logs before the next window opens. Windows of
    profiled steps are not timed."""
    f, profiler = trainer.flags, trainer.profiler
    profiler.plan(1, num_iter)
    clock = Windows(f.warmup_steps)
    profiled = False  # the open window holds a profiled step
    for i in range(1, num_iter + 1):
        fn, args, outputs = dispatch(i)
        profiled = profiled or profiler.active
        if not sync.events(i, f, start=0, total=num_iter, profiler=profiler).sync:
            continue
        outputs = read(outputs)  # the sync point: waits for the device
        clock.close(i, profiled)
        profiled = False
        profiler.after(i, fn, args, final=i == num_iter)
        on_sync(i, outputs, clock)
        clock.reopen()
    return clock


def training(trainer) -> dict:
    """Steps on the training data as in ``Trainer.train`` (the same compiled step), without
    saves or evaluations, timed over the windows between sync points after the warm-up; a
    non-finite loss stops the run within a window, as in training."""
    f, task, unit = trainer.flags, trainer.task, trainer.task.item_unit
    step_fn = trainer.compiled_train_step()
    trainer.dist.broadcast(trainer.state())
    data = batches(trainer.on_device(task.train_dataset()),
                   lambda: task.locate_bad_record("train"))
    current = {"states": trainer.initial_train_states(), "micro": None}

    def dispatch(i):
        micro, states_in = trainer.step_batches(data), current["states"]
        trainer.profiler.before(i)
        loss, current["states"] = step_fn(micro, states_in)
        current["micro"] = micro
        return step_fn, (micro, states_in), loss

    def on_sync(i, loss, clock):
        last = i == f.num_iter
        trainer.check_inputs("train")
        trainer.guard.check(i, loss, trainer.checkpoints.latest, trainer.loss_scale(),
                            last=last and not trainer.loss_scaled)
        if i % f.display_every == 0 or last:
            trainer.log.log((0, i), {"loss": loss, f"{unit}_per_s": clock.rate(
                trainer.global_items(current["micro"])), "warmup": i <= f.warmup_steps},
                progress=(i, f.num_iter), tb_step=i)

    clock = timed_loop(trainer, f.num_iter, dispatch, float, on_sync)
    items_per_step = trainer.global_items(current["micro"])
    return {**clock.summary(items_per_step, unit, f.profile), "global_batch_size": items_per_step,
            **trainer.profiler.report}


def inference(trainer) -> dict:
    """The serving computation on the inference data, timed like ``training``: the host reads
    a step's outputs only at sync points (``--display_every 1``: every step, for per-batch
    latency). With ``--use_tftrt``, the model converted by TF-TRT."""
    f, task, unit = trainer.flags, trainer.task, trainer.task.item_unit
    data = batches(trainer.on_device(task.inference_dataset()))
    if f.use_tftrt:
        if trainer.dist.size > 1:
            raise UsageError("--use_tftrt benchmarks one GPU: run it without mpirun/horovodrun")
        state = task.initial_state(trainer.model, "infer")
        infer = tftrt.benchmark_infer(task, trainer.model, f.results_dir, f.use_tftrt,
                                      task.inference_inputs(next(data)), state,
                                      log=trainer.log.print)
    else:
        model = trainer.inference_model()
        state = task.initial_state(model, "infer")
        infer = tf.function(lambda x, state: task.infer(model, x, state),
                            jit_compile=trainer.ctx.precision.xla)
    current = {"state": state, "batch": None, "inputs": None}

    def dispatch(i):
        batch = next(data)
        inputs, state_in = task.inference_inputs(batch), current["state"]
        trainer.profiler.before(i)
        outputs, current["state"] = infer(inputs, state_in)
        current.update(batch=batch, inputs=inputs)
        return infer, (inputs, state_in), outputs

    def on_sync(i, outputs, clock):
        if i % f.display_every == 0 or i == f.num_iter:
            trainer.log.log((0, i), {f"{unit}_per_s": clock.rate(task.items_in(current["batch"])),
                                     "warmup": i <= f.warmup_steps},
                            progress=(i, f.num_iter), tb_step=i)

    clock = timed_loop(trainer, f.num_iter, dispatch,
                       lambda out: tf.nest.map_structure(lambda t: t.numpy(), out), on_sync)
    return {**clock.summary(task.items_in(current["batch"]), unit, f.profile),
            "batch_size": int(tf.nest.flatten(current["inputs"])[0].shape[0]),
            **trainer.profiler.report}
