"""A rank that stops answering ends the job within ``--hang_timeout`` seconds, with one line
that names it, instead of holding every other rank in its allreduce until the job's time limit.

Why a watchdog of our own: a rank stopped without dying (SIGSTOP, a host cut off from the
network, a collective stuck on one GPU) makes the others wait inside a collective that has no
timeout: Horovod's MPI controller gathers from every rank each cycle, so its stall inspector
never gets to speak; NCCL waits on the GPU; only Gloo has a timeout, and only under horovodrun.
A dead rank is the launcher's business (mpirun aborts the job, ``srun --kill-on-bad-exit`` ends
the step); a silent one is nobody's.

How: under Horovod each rank runs a thread that writes a heartbeat file,
``<results_dir>/.heartbeat/rank-N.json`` (a counter, its host and pid, how long it has waited
for a step, the run it belongs to and the launch that started it), every ``timeout / 10``
seconds (1 to 30), and reads the others'. Records of another run (a killed job's, left behind)
are not read: the ranks agree on a run id at start. The training loop beats at every step and
after its work at a sync point (``common/core/loop.py``); the first beat, after the first step,
arms the watch (tracing and compiling are not a hang). When this rank has not beaten for longer
than the timeout:

* a rank whose counter has not moved for half the timeout has stopped answering: named;
* every rank answers but has not beaten for half the timeout either: a stuck collective;
* some ranks' files are not visible: after twice the timeout, named as not visible (a
  ``--results_dir`` that not every host shares is refused at start,
  ``distributed.check_shared``; this is a file system that stopped answering).

So the timeout must exceed the longest stretch without a step that a healthy run has: an
evaluation, a checkpoint written by rank 0 while the others wait (the default, 600 s, does).
The lowest rank that still answers says so in one line (the others wait a few heartbeats more,
so one line is printed), marks its heartbeat as ending the job (the others then end without a
line) and ends its process with exit status 1. A launcher whose other ranks are all reachable
ends the job at that exit (mpirun's abort, srun's ``--kill-on-bad-exit``); one that cannot reach a
node (cut off, or dead before Slurm or TCP notices) would wait for it for minutes, so
``scripts/launch.sh`` watches for the ending mark of its own launch and ends its launcher
seconds later. Counters rather than file times: hosts' clocks need not agree. The checkpoint
written last is whole (checkpoints are written to a temporary name and renamed), so the next
job resumes from it.

A stop signal (SIGTERM, SIGINT, SIGUSR1) is taken at a step boundary every rank agrees on
(``graceful_stop.py``), which a rank waiting in a collective for a rank that is gone never
reaches: Python runs no signal handler while the main thread is inside the collective. The
signal still reaches this thread (``signal.set_wakeup_fd``); from then on it beats every second,
and if no step finishes within ``stop_grace`` (5 s, or three times the longest step so far;
the caller's work at a sync point, an evaluation or a checkpoint, does not count) it ends the
process the same way, rather than wait for the SIGKILL that follows (Slurm's ``KillWait``).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import threading
import time

from common.errors import say
from common.runtime.graceful_stop import GracefulStop

EXIT_STATUS = 1  # an error, as a data or training error: the launcher ends the other ranks
STOP_SIGNALS = GracefulStop.SIGNALS  # what the training loop takes as a request to stop
STOP_GRACE_S = 5.0
STOP_INTERVAL_S = 1.0  # the heartbeat's interval once a stop signal came


def interval_for(timeout: float) -> float:
    return min(30.0, max(1.0, timeout / 10))


class Watchdog:
    """``beat()`` after each step, ``working()`` around long work between steps (rank 0's
    checkpoint, an evaluation). ``run``: the id every rank of this run writes (records of other
    runs are not read). ``exit`` is what ends the process (``os._exit``: the main thread is stuck
    in a collective, so nothing that needs it can run)."""

    def __init__(self, directory: str, rank: int, size: int, timeout: float, prog: str = "main.py",
                 exit=os._exit, stream=None, run: str | None = None):
        self.directory, self.rank, self.size, self.timeout = directory, rank, size, timeout
        self.interval = interval_for(timeout)
        self.prog, self._exit, self._stream, self.run = prog, exit, stream, run
        self._lock = threading.Lock()
        self._last_beat: float | None = None  # None until the first step: compiling is not a hang
        self._step = None
        self._counter = 0
        self._longest_step = 0.0  # the longest stretch between two beats outside working()
        self._working = False
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None  # the signals' wake-up pipe (read, write)
        self._previous_wakeup = -1
        self._closing = False
        # rank -> (what it last wrote, when that changed): counters, not file times, since
        # hosts' clocks need not agree
        self._peers: dict[int, tuple[object, float]] = {}
        self.fired: str | None = None
        self._waited_extra = 0  # rounds a rank that is not the one to speak has waited
        self._last_tick: float | None = None
        self.stop_signal: str | None = None  # the first stop signal's name, and when it came
        self._stop_at: float | None = None

    # --- what the loop calls --------------------------------------------------------------
    def beat(self, step: int | None = None) -> None:
        with self._lock:
            now = time.monotonic()
            if self._last_beat is not None:
                self._longest_step = max(self._longest_step, now - self._last_beat)
            self._last_beat = now
            self._step = step

    @contextlib.contextmanager
    def working(self):
        """Work between steps that may take long (rank 0 writing a checkpoint, an evaluation):
        no step is expected within it, so a stop signal's grace does not run out there, on
        this rank or on a rank that waits for it (the heartbeat says so); its end counts as a
        beat."""
        with self._lock:
            self._working = True
        try:
            yield
        finally:
            with self._lock:
                self._working = False
                self._last_beat = time.monotonic()

    def idle(self) -> float:
        """Seconds since this rank's last beat (0 before the first one)."""
        with self._lock:
            if self._last_beat is None:
                return 0.0
            return time.monotonic() - self._last_beat

    def stop_grace(self) -> float:
        """How long after a stop signal a step must come before this rank takes itself to be
        waiting for one that is gone."""
        return min(self.timeout, max(STOP_GRACE_S, 3 * self._longest_step))

    def stop_requested(self, signum: int, now: float) -> None:
        if self._stop_at is None:
            self._stop_at, self.stop_signal = now, signal.Signals(signum).name

    # --- the thread -----------------------------------------------------------------------
    def _path(self, rank: int) -> str:
        return os.path.join(self.directory, f"rank-{rank}.json")

    def _write(self, ending: str | None = None) -> None:
        self._counter += 1
        record = {"rank": self.rank, "host": socket.gethostname(), "pid": os.getpid(),
                  "beat": self._counter, "idle": round(self.idle(), 1), "step": self._step,
                  "run": self.run, "launch": os.environ.get("LAUNCH_ID")}
        if self.stop_signal:
            record["stopping"] = self.stop_signal
        if self._working:
            record["working"] = True
        if ending:
            # this rank ends the job: the others need not say so, and scripts/launch.sh ends a
            # launcher that still waits for a node it cannot reach
            record["ending"] = ending
        tmp = self._path(self.rank) + f".{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self._path(self.rank))
        except OSError:  # a full or read-only disk: the watch goes on with what it can read
            pass

    def _read(self, rank: int) -> dict | None:
        """A rank's record of this run (None: none yet, or one left by another run)."""
        try:
            with open(self._path(rank)) as f:
                record = json.load(f)
        except (OSError, ValueError):
            return None
        if self.run is not None and record.get("run") != self.run:
            return None
        return record

    def check(self, now: float | None = None) -> str | None:
        """Reads the other ranks' heartbeats; returns the line to end with, or None; "" when
        another rank is ending the job already (it said why: this one ends without a line,
        rather than wait for the launcher's kill, which Slurm sends only after KillWait)."""
        now = time.monotonic() if now is None else now
        records = {}
        for r in range(self.size):
            if r == self.rank:
                continue
            rec = self._read(r)
            records[r] = rec
            if rec is not None:
                seen = (rec.get("pid"), rec.get("beat"))
                if r not in self._peers or self._peers[r][0] != seen:
                    self._peers[r] = (seen, now)
        if any(rec is not None and rec.get("ending") for rec in records.values()):
            return ""
        stuck = self._stuck_after_stop(now, records)
        if stuck:
            return stuck
        idle = self.idle()
        if idle <= self.timeout:
            self._waited_extra = 0
            return None
        silent = {r: now - self._peers[r][1] for r, rec in records.items()
                  if rec is not None and now - self._peers[r][1] > self.timeout / 2}
        invisible = [r for r, rec in records.items() if rec is None]
        waited = (f"no training step finished on rank {self.rank} for {idle:.0f} s "
                  f"(--hang_timeout {self.timeout:g})")
        if silent:
            who = ", ".join(f"rank {r} ({records[r].get('host')}, pid {records[r].get('pid')}) "
                            f"stopped answering {s:.0f} s ago"
                            for r, s in sorted(silent.items()))
            line = f"{waited}: {who}"
        elif invisible:
            if idle <= 2 * self.timeout:
                return None
            line = (f"{waited}: rank(s) {_ranges(invisible)} cannot be seen from here "
                    f"({self.directory} stopped answering, or is not shared by every host)")
        else:
            busy = [r for r, rec in records.items() if float(rec.get("idle", 0)) < self.timeout / 2]
            if busy:
                return None  # a rank still steps, or has not started to
            line = (f"{waited}: every rank answers but none finishes a step "
                    "(a collective is stuck)")
        answering = [r for r in range(self.size) if r not in silent]
        if answering and self.rank != min(answering) and not self._waited_enough():
            return None  # the lowest rank that answers says it; this one follows if still alive
        return line + "; ending the job"

    def _waited_enough(self) -> bool:
        self._waited_extra += 1
        return self._waited_extra >= 3

    def _stuck_after_stop(self, now: float, records: dict) -> str | None:
        """The line to end with when a stop signal came and no step has finished for the
        grace since, while neither this rank nor a rank that took the signal too (and still
        beats) is working between steps; or None."""
        with self._lock:
            if self._stop_at is None or self._working or self._last_beat is None:
                return None
            quiet = now - max(self._stop_at, self._last_beat)
        if quiet <= self.stop_grace():
            return None
        if any(rec is not None and rec.get("working") and rec.get("stopping")
               and now - self._peers[r][1] <= 3 * STOP_INTERVAL_S for r, rec in records.items()):
            return None  # e.g. rank 0 writes a checkpoint: this one waits for it
        if self.rank != 0 and not self._waited_enough():
            return None  # one line: rank 0's, where it is stuck too
        return (f"{self.stop_signal} came {now - self._stop_at:.0f} s ago and no training step "
                f"has finished on rank {self.rank} since: it waits in a collective for a rank "
                "that is gone; ending without a stop checkpoint (the last checkpoint written is "
                "whole)")

    def tick(self, now: float) -> str | None:
        """One round of the thread: the heartbeat, then the check. A round that comes long
        after the last one means this process was itself stopped (SIGSTOP, then the SIGCONT that
        slurmstepd sends before it kills a step) or starved: what it saw of the others before is
        stale, so it starts watching them afresh rather than name a rank that went quiet while
        this one was frozen (the rank that named it has just ended the job)."""
        self._write()
        frozen = self._last_tick is not None and now - self._last_tick > 3 * self._interval()
        self._last_tick = now
        if frozen:
            self._peers.clear()
            self._waited_extra = 0
            return None
        return self.check(now)

    def _interval(self) -> float:
        return STOP_INTERVAL_S if self._stop_at is not None else self.interval

    def _wait(self) -> bool:
        """Sleeps for one interval, taking the stop signals that come meanwhile; False when the
        watch is closing."""
        if self._pipe is None:
            time.sleep(self._interval())
            return not self._closing
        deadline = time.monotonic() + self._interval()
        while not self._closing:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if select.select([self._pipe[0]], [], [], left)[0]:
                with contextlib.suppress(BlockingIOError):
                    for signum in os.read(self._pipe[0], 64):
                        if signum in STOP_SIGNALS:
                            self.stop_requested(signum, time.monotonic())
                            deadline = min(deadline, time.monotonic() + STOP_INTERVAL_S)
        return False

    def _run(self) -> None:
        while self._wait():
            line = self.tick(time.monotonic())
            if line is not None:
                self.fired = line
                try:
                    if line:
                        self._write(ending=line)
                        say(f"{self.prog}: error (rank {self.rank}): {line}", self._stream)
                finally:
                    self._exit(EXIT_STATUS)
                return

    # --- start and stop -------------------------------------------------------------------
    def __enter__(self) -> Watchdog:
        with contextlib.suppress(OSError):  # the run's own checks have found the directory fit
            os.makedirs(self.directory, exist_ok=True)
        self._write()
        if threading.current_thread() is threading.main_thread():
            # Python's C-level handler writes each signal's number here even while the main
            # thread is inside a collective, where no Python handler runs.
            self._pipe = os.pipe()
            for fd in self._pipe:
                os.set_blocking(fd, False)
            self._previous_wakeup = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._run, name="hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._closing = True
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], b"\0")  # wakes the thread's select
        if self._thread is not None:
            self._thread.join()
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
        with contextlib.suppress(OSError):
            os.remove(self._path(self.rank))
        with contextlib.suppress(OSError):  # the last rank out removes the folder
            os.rmdir(self.directory)
        return False


def _ranges(ranks: list[int]) -> str:
    return ", ".join(map(str, sorted(ranks)))


class _Off:
    """No watch: one process, or ``--hang_timeout 0``."""

    def beat(self, step=None) -> None:
        return None

    def working(self):
        return contextlib.nullcontext()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


OFF = _Off()


def for_run(results_dir: str, dist, timeout: float, prog: str = "main.py"):
    """The watch of a training run: on when more than one rank trains and the timeout is set.
    Its run id is rank 0's, sent to every rank (``dist.broadcast_object``)."""
    if dist.size < 2 or not timeout:
        return OFF
    run = dist.broadcast_object(os.urandom(8).hex() if dist.is_chief else None)
    return Watchdog(os.path.join(results_dir, ".heartbeat"), dist.rank, dist.size, timeout, prog,
                    run=run)
