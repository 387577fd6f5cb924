"""The step loop, once: training and both benchmark modes run it.

Each step is dispatched without waiting for the device. ``events`` decides which steps are
sync points (a logged step, the end of the warm-up, a save, an evaluation, the profiler's
edges, the last step; every step for an inference benchmark, whose latency is a step's). At a
sync point the loop waits for the device once, closes the clock's window, runs the profiler,
lets the stepper check what the device found (bad inputs, non-finite steps), and hands the
sync point to its caller, whose actions (display, save, evaluate, stop) hang off it: the next
window opens after them, so their time is never counted as the steps'.

A caller gives a ``Stepper`` (what one step is: ``common/core/steppers.py``) and reads the
``Clock`` for throughput and latency. This is the loop of Orbit's ``Controller.train`` and
nanoGPT's ``bench.py``: the same dispatch, wait and clock for a training run and a benchmark.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import numpy as np

from common.runtime.log_names import PERCENTILES, LogNames
from common.runtime.watchdog import OFF as _NO_WATCH

# --- when the host waits for the device: the sync points of the training and benchmark loops.
# Between sync points the host only dispatches steps (no ``.numpy()``, no ``float(loss)``), so
# the device never idles while Python logs. At a sync point the loop reads the loss and the
# device-side counters (non-finite steps, bad inputs), logs, saves, evaluates or profiles. One
# function decides which of those a step is, for every loop.
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


class Stepper:
    """One kind of step. ``dispatch(step)`` starts it on the device and returns what the host
    will read (a loss, outputs) without waiting; ``wait(handle)`` reads it (the only wait);
    ``check(step, value, last)`` raises for what the device found wrong. ``items`` is what the
    last step processed over every rank (images, tokens), ``profiled`` the function and
    arguments of the last step (the profiler types its ops from their graph)."""
    items: int = 0
    profiled: tuple = (None, ())

    def dispatch(self, step: int):
        raise NotImplementedError

    def wait(self, handle):
        raise NotImplementedError

    def check(self, step: int, value, last: bool) -> None:
        return None


def epoch_of(step: int, steps_per_epoch: int) -> int:
    """The epoch a step belongs to, numbered as training numbers it (from 1)."""
    return (step - 1) // steps_per_epoch + 1 if step > 0 else 0


@dataclasses.dataclass(frozen=True)
class Window:
    seconds: float
    steps: int
    items: int
    timed: bool  # after the warm-up and without profiled steps


class Clock:
    """Wall time between sync points, in windows: each from the end of one sync point's own
    work (logging, a save, an evaluation) to the next wait for the device. A window that starts
    before ``timed_from`` (the warm-up) or holds a profiled step is not timed."""

    def __init__(self, timed_from: int):
        self.timed_from = timed_from
        self.windows: list[Window] = []
        self.profiled_out = 0  # steps after the warm-up left out because they were profiled
        self._first, self._items = timed_from, 0
        self._start = time.perf_counter()

    def begin(self, step: int) -> None:
        """The loop's first step is ``step``; its window starts now."""
        self._first, self._items, self._start = step, 0, time.perf_counter()

    def add(self, items: int) -> None:
        self._items += items

    def close(self, step: int, profiled: bool) -> Window:
        """Right after the host waited for the device at ``step``."""
        timed = self._first > self.timed_from
        steps = step - self._first + 1
        if timed and profiled:
            self.profiled_out += steps
        window = Window(time.perf_counter() - self._start, steps, self._items,
                        timed and not profiled)
        self.windows.append(window)
        self._first = step + 1
        return window

    def reopen(self) -> None:
        """After the sync point's own work: the next window starts now."""
        self._items, self._start = 0, time.perf_counter()

    def rate(self, since: int = 0) -> float:
        """Items per second over the windows closed since the ``since``-th."""
        windows = self.windows[since:]
        seconds = sum(w.seconds for w in windows)
        return sum(w.items for w in windows) / seconds if seconds > 0 else 0.0

    @property
    def timed(self) -> list[Window]:
        return [w for w in self.windows if w.timed]

    def timed_rate(self) -> float:
        """Items per second over the timed windows (0 without any)."""
        seconds = sum(w.seconds for w in self.timed)
        return sum(w.items for w in self.timed) / seconds if seconds > 0 else 0.0

    def throughput(self, names: LogNames, phase: str) -> dict:
        """Throughput over the timed windows, and per-step latencies in milliseconds when every
        timed window is one step (each step waited for: an inference benchmark, or
        ``--display_every 1``), under the model's names (``names``; ``phase`` "train" or
        "eval", as NVIDIA's scripts name an inference benchmark's); with longer windows a
        step's own time is not measured, and the summary says so."""
        windows = self.timed
        steps = sum(w.steps for w in windows)
        if not steps:
            raise ValueError("no timed steps: --num_iter must exceed --warmup_steps")
        seconds = sum(w.seconds for w in windows)
        rate = names.train_throughput if phase == "train" else names.infer_throughput
        out = {rate: sum(w.items for w in windows) / seconds,
               "timed_steps": steps, "timed_seconds": seconds, "timed_windows": len(windows)}
        if all(w.steps == 1 for w in windows):
            ms = 1000.0 * np.asarray([w.seconds for w in windows])
            out[names.latency(phase, "avg")] = float(ms.mean())
            for p in PERCENTILES:
                out[names.latency(phase, p)] = float(np.percentile(ms, p))
        else:
            longest = max(w.steps for w in windows)
            out["latency"] = (f"not per step: the host waited every {longest} steps "
                              "(--display_every 1 waits at each)")
        return out


@dataclasses.dataclass(frozen=True)
class SyncPoint:
    step: int
    events: Events
    value: object  # what the stepper's wait read: the loss, or the outputs
    stopping: bool  # every rank stops here (a signal)
    window_index: int  # the clock's windows before this point's: for a display's rate


def run(stepper: Stepper, flags, profiler, clock: Clock, *, start: int, total: int,
        steps_per_epoch: int | None = None, evaluate: bool = False, every_step: bool = False,
        stop=None, dist=None, watchdog=None) -> Iterator[SyncPoint]:
    """Steps ``start + 1`` .. ``total``; yields each sync point after the wait, the profiler
    and the stepper's checks. ``stop`` (a ``GracefulStop``) is asked at the steps every rank
    agrees to vote at (``Events.vote``); a stopping point is the last. ``watchdog``
    (``common/runtime/watchdog.py``) hears a beat at every step and after the caller's work at a
    sync point."""
    watchdog = watchdog or _NO_WATCH
    clock.begin(start + 1)
    profiled = False  # the open window holds a profiled step
    for step in range(start + 1, total + 1):
        if not profiler.active:
            profiler.before(step)
        handle = stepper.dispatch(step)
        watchdog.beat(step)
        clock.add(stepper.items)
        profiled = profiled or profiler.active
        ev = events(step, flags, start=start, total=total, steps_per_epoch=steps_per_epoch,
                         evaluate=evaluate, profiler=profiler)
        stopping = bool(stop) and (dist is None or not dist.enabled or ev.vote) \
            and stop.should_stop(dist)
        if not (ev.sync or stopping or every_step):
            continue
        value = stepper.wait(handle)  # the sync point: waits for the device
        clock.close(step, profiled)
        profiled = False
        if profiler.active:
            fn, args = stepper.profiled
            profiler.after(step, fn, args, final=ev.last or stopping)
        watchdog.beat(step)
        stepper.check(step, value, ev.last)
        yield SyncPoint(step, ev, value, stopping, len(clock.windows) - 1)
        watchdog.beat(step)
        if stopping:
            return
        clock.reopen()
