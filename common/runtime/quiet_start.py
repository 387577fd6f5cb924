"""TensorFlow's start-up lines that mean nothing on a healthy machine, kept off the console.

Importing TensorFlow and finding its devices writes lines straight to file descriptor 2 from
C++, before ``TF_CPP_MIN_LOG_LEVEL`` takes effect (TensorFlow 2.21 logs through absl before
absl's log is initialised): on a CPU machine six of them, among them ``E0000 ... failed call to
cuInit: ... UNKNOWN ERROR (303)``, which reads as a fault, and every rank of a job repeats them.
``filtered_stderr`` catches descriptor 2 for the block and then writes back every line except
those listed in ``BENIGN`` (and, only where no NVIDIA driver is installed, those that say so):
an unknown line, or a real error, reaches the console in full and in order. The run's own
device line (``common.runner``) says what was found instead.

Lines are held for ``HOLD_SECONDS`` at most: a start-up that hangs (a lock, a driver, NCCL
initialisation on a cluster) shows what it has written, filtered, every ``HOLD_SECONDS``; a slow
one (a loaded machine) keeps its benign lines off the console however long it takes. A stop
signal ends the block by an exception, which writes them back too.

Only the standard library is imported here: it runs before TensorFlow.
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import sys
import tempfile
import threading

# How long start-up lines are held before they are shown anyway (QUIET_START_HOLD_S).
HOLD_SECONDS = float(os.environ.get("QUIET_START_HOLD_S", "10"))


def _line(level: str, message: str) -> re.Pattern:
    """A C++ log line of ``level`` (I, W, E) whose message starts with ``message``, in absl's
    form (``E0000 00:00:1795630750.752922 7393 cuda_platform.cc:52] ...``, TensorFlow 2.18 and
    later) or TensorFlow's own (``2026-11-25 18:25:12.342613: E external/.../cuda_fft.cc:485]
    ...``, up to 2.17)."""
    return re.compile(rf"^(?:{level}\d{{4}} [^\]]*\]|\d{{4}}-\d\d-\d\d [\d:.]+: {level} [^\]]*\]) "
                      + message)


# Informational lines of every start, on any machine (TensorFlow 2.17 to 2.21).
BENIGN = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are "
               r"written to STDERR$"),
    _line("I", r"oneDNN custom operations are on\."),
    _line("I", r"This TensorFlow binary is optimized to use available CPU instructions"),
    re.compile(r"^To enable the following instructions: .*rebuild TensorFlow with the "
               r"appropriate compiler flags\.$"),
    # pip wheels of TensorFlow 2.15-2.17 register the CUDA libraries' factories twice.
    _line("E", r"Unable to register (cuDNN|cuFFT|cuBLAS) factory: Attempting to register "
               r"factory for plugin \w+ when one has already been registered$"),
    _line("W", r"TF-TRT Warning: Could not find TensorRT$"),
)
# Lines that are only benign where there is no NVIDIA driver: on a machine with one, they say
# the GPUs cannot be used, and they are shown.
NO_DRIVER = (
    _line("I", r"Could not find cuda drivers on your machine, GPU will not be used\.$"),
    _line("E", r"failed call to cuInit: .*(UNKNOWN ERROR \(303\)|CUDA_ERROR_NO_DEVICE|"
               r"no CUDA-capable device)"),
)


def nvidia_driver_present() -> bool:
    """An NVIDIA kernel driver is loaded (its /proc entry or a device node exists)."""
    if os.path.exists("/proc/driver/nvidia/version"):
        return True
    try:
        return any(re.fullmatch(r"nvidia\d+", d) for d in os.listdir("/dev"))
    except OSError:
        return False


def kept(lines, driver: bool, extra=()):
    """The lines of ``lines`` that are not known to be benign here (``extra``: more patterns
    the caller knows to be benign)."""
    benign = BENIGN + (() if driver else NO_DRIVER) + tuple(extra)
    return [ln for ln in lines if not any(p.search(ln.rstrip("\n")) for p in benign)]


_releases = []  # the open filtered_stderr blocks' write-backs, innermost last


def release_held() -> None:
    """Writes back now what the open ``filtered_stderr`` blocks hold: for a process about to end
    with ``os._exit`` inside one (``common.versions``: a stop signal while TensorFlow imports),
    whose last line would otherwise stay in the caught file."""
    for release in reversed(list(_releases)):
        release()


@contextlib.contextmanager
def filtered_stderr(extra=()):
    """Descriptor 2 caught for the block, then written back without the benign lines (also when
    the block raises, so that no error is lost); ``extra``: more patterns of benign lines. A
    process that dies inside the block (TensorFlow aborts on a CPU without the instructions it
    was built for) cannot write back what it caught: Python's fault handler then reports the
    fatal signal and where it struck on the real descriptor 2."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no descriptor 2 (a detached process)
        yield
        return
    ours = not faulthandler.is_enabled()  # one a caller enabled (pytest's) is left as it is
    if ours:
        real = os.fdopen(os.dup(saved), "w")
        faulthandler.enable(file=real)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        lock, released, shown = threading.Lock(), [], [0]

        def flush(final: bool) -> None:
            """The whole lines caught since the last flush, filtered, to the console (with
            ``final`` the rest too, and descriptor 2 given back: once)."""
            with lock:
                if released:
                    return
                try:
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                if final:
                    released.append(True)
                    os.dup2(saved, 2)
                # pread: the descriptor's offset is the one fd 2 writes at (dup2 shares it)
                fd = caught.fileno()
                data = os.pread(fd, os.fstat(fd).st_size - shown[0], shown[0])
                if not final:
                    data = data[:data.rfind(b"\n") + 1]
                shown[0] += len(data)
                text = data.decode("utf-8", errors="replace")
                out = "".join(kept(text.splitlines(keepends=True), nvidia_driver_present(),
                                   extra))
                if out:
                    os.write(saved, out.encode("utf-8"))

        def release():
            flush(True)

        def tick():
            while not stop.wait(HOLD_SECONDS):  # a hang shows its lines as they come
                flush(False)

        stop = threading.Event()
        timer = threading.Thread(target=tick, daemon=True)
        timer.start()
        _releases.append(release)
        try:
            yield
        finally:
            _releases.remove(release)
            stop.set()
            if ours:
                faulthandler.disable()
                real.close()
            release()
            os.close(saved)
