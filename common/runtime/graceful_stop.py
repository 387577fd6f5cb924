"""SIGTERM / SIGINT ask training to stop at a step boundary that every rank agrees on.

The first signal only sets a flag; the loop asks ``should_stop`` after each step (under Horovod,
at its sync points and every ``sync.STOP_CHECK_EVERY`` steps, which every rank knows alike),
where under Horovod it is a max-allreduce so that a signal that reached a single rank stops them
all at the same step. Rank 0 then writes a checkpoint and every rank exits 0; the next run
resumes from there.
A second SIGINT raises ``KeyboardInterrupt`` at once, for a user who really wants out.

Outside the training loop (start-up and imports, evaluation, prediction, benchmarks, export)
SIGTERM and SIGUSR1 raise ``Interrupted`` from the moment ``install`` runs, the first thing a
``main.py`` does (``common/entry.py``): the process unwinds, so an export's staging folder is
removed on the way out, and ends with one line and exit 0 (a stop on request: the launchers
forward a SIGTERM as SIGUSR1 to ranks that may still be importing TensorFlow). Without it
Python's default would end the process where it stood: SIGUSR1 kills it ("signal 10"),
SIGTERM leaves no chance to clean up. The line says what the stop cut short (``phase``: the
runner sets it for each part of a run, an export for its own steps, ``written`` what is already
whole), and a step that must not be cut in two (an export's swap into place) holds the stop
signals until it is done (``deferred``); during an export Ctrl-C stops as SIGTERM does
(``sigint_stops``).
"""
from __future__ import annotations

import contextlib
import signal
import threading

_phase = "while starting (nothing written)"
_written: list[str] = []


def set_phase(text: str, reset: bool = False) -> None:
    """What a stop signal now cuts short, for the run's last line ("while exporting to X (not
    written; ...)"); ``reset``: a new run, nothing written yet."""
    global _phase
    _phase = text
    if reset:
        _written.clear()


def written(text: str) -> None:
    """Something this run has finished writing whole (an export swapped into place): every
    later stop line says so."""
    _written.append(text)


def phase() -> str:
    return _phase + "".join(f"; {w}" for w in _written)


@contextlib.contextmanager
def sigint_stops():
    """Within the block Ctrl-C stops as SIGTERM does (``Interrupted``: the line says what was
    cut short and what is whole, exit 0) rather than with Python's bare KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def deferred():
    """SIGTERM, SIGINT and SIGUSR1 held until the block ends, then delivered to the handlers
    they had: a step that must not be cut in two, such as renaming an export into place. Held
    by Python handlers that note the signal (a process's signal mask would not do: TensorFlow's
    threads take a signal the main thread blocks, and Python runs its handler all the same)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: pending.append(signum))
                for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


class Interrupted(BaseException):
    """A stop signal outside the training loop (a BaseException: no ``except Exception``
    swallows it)."""

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame


def _interrupt(signum, frame):
    # One request ends the process: a second (launch.sh signals mpirun, which forwards, and the
    # ranks too) must not interrupt the unwinding that cleans up and says so.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


# Ctrl-C outside training keeps Python's KeyboardInterrupt (common/versions.quiet_interrupts:
# "interrupted", the process ends by SIGINT as a shell expects).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def install() -> None:
    """From now on SIGTERM and SIGUSR1 raise ``Interrupted`` in the main thread, except inside a
    ``GracefulStop`` block, which takes them as a request to stop at a step."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _interrupt)


class GracefulStop:
    # SIGUSR1: what mpirun forwards to every rank without aborting the job (scripts/launch.sh
    # turns a SIGTERM to the launcher into it).
    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

    def __init__(self):
        self.requested_by = None  # name of the first signal received
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        return False

    def _handle(self, signum, frame):
        if self.requested_by is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.requested_by is None:
            self.requested_by = signal.Signals(signum).name

    def should_stop(self, dist) -> bool:
        return dist.any(self.requested_by is not None)
