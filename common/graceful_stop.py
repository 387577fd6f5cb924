"""SIGTERM / SIGINT ask training to stop at a step boundary that every rank agrees on.

The first signal only sets a flag; the loop asks ``should_stop`` after each step (under Horovod,
at its sync points and every ``sync.STOP_CHECK_EVERY`` steps, which every rank knows alike),
where under Horovod it is a max-allreduce so that a signal that reached a single rank stops them
all at the same step. Rank 0 then writes a checkpoint and every rank exits 0; the next run
resumes from there.
A second SIGINT raises ``KeyboardInterrupt`` at once, for a user who really wants out.
"""
from __future__ import annotations

import signal
import threading


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
