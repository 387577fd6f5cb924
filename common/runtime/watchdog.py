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
for a step), every ``timeout / 10`` seconds (1 to 30), and reads the others'. The training loop
beats at every step and after its work at a sync point (``common/core/loop.py``); the first beat,
after the first step, arms the watch (tracing and compiling are not a hang). When this rank has
not beaten for longer than the timeout:

* a rank whose counter has not moved for half the timeout has stopped answering: named;
* every rank answers but has not beaten for half the timeout either: a stuck collective;
* some ranks' files are not visible (``--results_dir`` not on a file system every host shares):
  after twice the timeout, named as not visible.

So the timeout must exceed the longest stretch without a step that a healthy run has: an
evaluation, a checkpoint written by rank 0 while the others wait (the default, 600 s, does).
The lowest rank that still answers says so in one line (the others wait a few heartbeats more,
so one line is printed) and ends its process with exit status 1; the launcher ends the rest.
Counters rather than file times: hosts' clocks need not agree. The checkpoint written last is
whole (checkpoints are written to a temporary name and renamed), so the next job resumes from it.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

from common.errors import say

EXIT_STATUS = 1  # an error, as a data or training error: the launcher ends the other ranks


def interval_for(timeout: float) -> float:
    return min(30.0, max(1.0, timeout / 10))


class Watchdog:
    """``beat()`` after each step. ``exit`` is what ends the process (``os._exit``: the main
    thread is stuck in a collective, so nothing that needs it can run)."""

    def __init__(self, directory: str, rank: int, size: int, timeout: float, prog: str = "main.py",
                 exit=os._exit, stream=None):
        self.directory, self.rank, self.size, self.timeout = directory, rank, size, timeout
        self.interval = interval_for(timeout)
        self.prog, self._exit, self._stream = prog, exit, stream
        self._lock = threading.Lock()
        self._last_beat: float | None = None  # None until the first step: compiling is not a hang
        self._step = None
        self._counter = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # rank -> (what it last wrote, when that changed): counters, not file times, since
        # hosts' clocks need not agree
        self._peers: dict[int, tuple[object, float]] = {}
        self.fired: str | None = None
        self._waited_extra = 0.0
        self._last_tick: float | None = None

    # --- what the loop calls --------------------------------------------------------------
    def beat(self, step: int | None = None) -> None:
        with self._lock:
            self._last_beat = time.monotonic()
            self._step = step

    def idle(self) -> float:
        """Seconds since this rank's last beat (0 before the first one)."""
        with self._lock:
            if self._last_beat is None:
                return 0.0
            return time.monotonic() - self._last_beat

    # --- the thread -----------------------------------------------------------------------
    def _path(self, rank: int) -> str:
        return os.path.join(self.directory, f"rank-{rank}.json")

    def _write(self, ending: str | None = None) -> None:
        self._counter += 1
        record = {"rank": self.rank, "host": socket.gethostname(), "pid": os.getpid(),
                  "beat": self._counter, "idle": round(self.idle(), 1), "step": self._step}
        if ending:
            record["ending"] = ending  # this rank ends the job: the others need not say so
        tmp = self._path(self.rank) + f".{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self._path(self.rank))
        except OSError:  # a full or read-only disk: the watch goes on with what it can read
            pass

    def _read(self, rank: int) -> dict | None:
        try:
            with open(self._path(rank)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

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
        idle = self.idle()
        if idle <= self.timeout:
            self._waited_extra = 0.0
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
                    f"({self.directory} is not shared by every host?)")
        else:
            busy = [r for r, rec in records.items() if float(rec.get("idle", 0)) < self.timeout / 2]
            if busy:
                return None  # a rank still steps, or has not started to
            line = (f"{waited}: every rank answers but none finishes a step "
                    "(a collective is stuck)")
        answering = [r for r in range(self.size) if r not in silent]
        if answering and self.rank != min(answering):
            # The lowest rank that answers says it; this one follows if the launcher has not
            # ended it by then.
            self._waited_extra += self.interval
            if self._waited_extra < 3 * self.interval:
                return None
        return line + "; ending the job"

    def tick(self, now: float) -> str | None:
        """One round of the thread: the heartbeat, then the check. A round that comes long
        after the last one means this process was itself stopped (SIGSTOP, then the SIGCONT that
        slurmstepd sends before it kills a step) or starved: what it saw of the others before is
        stale, so it starts watching them afresh rather than name a rank that went quiet while
        this one was frozen (the rank that named it has just ended the job)."""
        self._write()
        frozen = self._last_tick is not None and now - self._last_tick > 3 * self.interval
        self._last_tick = now
        if frozen:
            self._peers.clear()
            self._waited_extra = 0.0
            return None
        return self.check(now)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
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
        self._thread = threading.Thread(target=self._run, name="hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


OFF = _Off()


def for_run(results_dir: str, rank: int, size: int, timeout: float, prog: str = "main.py"):
    """The watch of a training run: on when more than one rank trains and the timeout is set."""
    if size < 2 or not timeout:
        return OFF
    return Watchdog(os.path.join(results_dir, ".heartbeat"), rank, size, timeout, prog)
