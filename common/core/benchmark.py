"""The benchmark modes (``training_benchmark``, ``inference_benchmark``) on the one step loop
(``common/core/loop.py``), each given its stepper (``common/core/steppers.py``), not the Trainer.

Throughput is items over the wall time of the timed windows (after ``--warmup_steps``,
profiled steps left out). Latency is a step's own time, measured only where the host waits for
every step: always in an inference benchmark (a sync per step is what an inference latency
is, as NVIDIA's scripts time it), and in a training benchmark with ``--display_every 1``;
otherwise the summary says that it was not measured per step.
"""
from __future__ import annotations

from common.core import loop
from common.runtime.log_names import LogNames


def _summary(clock: loop.Clock, names: LogNames, phase: str, profile: str | None) -> dict:
    out = clock.throughput(names, phase)
    if clock.profiled_out:
        out["throughput_excludes_profiled_steps"] = profile
    return out


def _timed_loop(stepper, flags, profiler, log, names: LogNames, steps_per_epoch: int,
                every_step: bool, logged) -> loop.Clock:
    """Both modes' loop: steps 1..--num_iter, a line per --display_every steps."""
    clock = loop.Clock(timed_from=flags.warmup_steps)
    profiler.plan(1, flags.num_iter)
    displayed = 0  # the clock's windows up to the last displayed step
    for sp in loop.run(stepper, flags, profiler, clock, start=0, total=flags.num_iter,
                       every_step=every_step):
        if sp.events.display:
            log.log((loop.epoch_of(sp.step, steps_per_epoch), sp.step),
                    {**logged(sp), names.step_throughput: clock.rate(displayed),
                     "warmup": sp.step <= flags.warmup_steps},
                    progress=(sp.step, flags.num_iter), tb_step=sp.step)
            displayed = sp.window_index + 1
    return clock


def training(stepper, flags, profiler, log, names: LogNames, steps_per_epoch: int,
             global_batch_size: int) -> dict:
    """Training steps on the training data (the compiled step training runs), without saves
    or evaluations; a non-finite loss stops the run at the next sync point, as in training.
    ``global_batch_size``: rows per step over every rank (the header's); the items counted
    (images, tokens) are ``{items}_per_step``."""
    clock = _timed_loop(stepper, flags, profiler, log, names, steps_per_epoch, False,
                        lambda sp: {names.loss: sp.value})
    return {**_summary(clock, names, "train", flags.profile),
            "global_batch_size": global_batch_size, names.per_step: stepper.items,
            **profiler.report}


def inference(stepper, flags, profiler, log, names: LogNames, steps_per_epoch: int) -> dict:
    """The serving computation on the inference data, every step waited for (its latency:
    NVIDIA's scripts record an inference benchmark's under "eval")."""
    clock = _timed_loop(stepper, flags, profiler, log, names, steps_per_epoch, True,
                        lambda sp: {})
    inputs = stepper.inputs
    import tensorflow as tf
    return {**_summary(clock, names, "eval", flags.profile),
            "batch_size": int(tf.nest.flatten(inputs)[0].shape[0]),
            names.per_step: stepper.items, **profiler.report}
