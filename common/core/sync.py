"""When the host waits for the device: the sync points of the training and benchmark loops.

Between sync points the host only dispatches steps (no ``.numpy()``, no ``float(loss)``), so
the device never idles while Python logs. At a sync point the loop reads the loss and the
device-side counters (non-finite steps, bad inputs), logs, saves, evaluates or profiles. One
function decides which of those a step is, for every loop.
"""
from __future__ import annotations

import dataclasses

# Steps between the ranks' checks for a stop request under Horovod (besides the sync points).
STOP_CHECK_EVERY = 10


@dataclasses.dataclass(frozen=True)
class Events:
    last: bool  # the run's last step
    display: bool  # a logged step (--display_every)
    save: bool  # a checkpoint (epoch end, --save_checkpoint_steps, the last step)
    evaluate: bool  # an evaluation (the last step, epoch ends, --eval_every)
    warmed_up: bool  # the end of the warm-up: throughput is timed from here
    profiled: bool  # the profiler's last step (--profile; rank 0's alone)
    before_profile: bool  # the step before the profiler's first: the profiled steps' time is
    #                       then measured from a sync point (and left out of throughput)
    vote: bool  # the ranks agree on a stop request here (an allreduce): a step every rank
    #             knows alike, a sync point other than the profiler's or every STOP_CHECK_EVERY

    @property
    def sync(self) -> bool:
        return (self.last or self.display or self.save or self.evaluate or self.warmed_up
                or self.profiled or self.before_profile)


def events(step: int, flags, *, start: int, total: int, steps_per_epoch: int | None = None,
           evaluate: bool = False, profiler=None) -> Events:
    """What ``step`` of a loop from ``start`` to ``total`` is. ``steps_per_epoch`` None: a
    benchmark (no saves); ``evaluate``: a ``train_and_evaluate`` run."""
    last = step == total
    end_of_epoch = bool(steps_per_epoch) and step % steps_per_epoch == 0
    display = step % flags.display_every == 0 or last
    save = steps_per_epoch is not None and (
        end_of_epoch or last
        or bool(flags.save_checkpoint_steps and step % flags.save_checkpoint_steps == 0))
    evaluating = evaluate and (last or (end_of_epoch and flags.eval_at_epoch_end)
                               or bool(flags.eval_every and step % flags.eval_every == 0))
    warmed_up = step - start == flags.warmup_steps
    return Events(last=last, display=display, save=save, evaluate=evaluating,
                  warmed_up=warmed_up, profiled=bool(profiler and profiler.stops_at(step)),
                  before_profile=bool(profiler and profiler.starts_after(step)),
                  vote=display or save or evaluating or warmed_up
                  or step % STOP_CHECK_EVERY == 0)
