"""Files that are written whole or not at all, and directories checked before a run needs
them: what checkpoints, exports, predictions, drawings, op tables and settings records share.

* ``check_output_dir``: a directory that is a file, read-only or full stops a run at its start
  with one line, not at the first write an epoch later.
* ``write_atomically``: a file holds the new text in full or keeps what it held.
* ``staged_dir``: a directory's new contents replace the old only once complete.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from common.errors import DataError, one_line


def check_output_dir(path: str, flag: str, need_bytes: int = 64 << 10,
                     purpose: str = "the logs need") -> None:
    """Stops with one line unless ``path`` is (or can be made) a writable directory with room."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise DataError(f"{flag} {path} is a file, not a directory")
    blocker = _file_above(path)
    if blocker:
        raise DataError(f"{flag} {path} cannot be made: {blocker} is a file, not a directory")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write_probe.{os.getpid()}")
        try:
            with open(probe, "wb") as f:
                f.write(b"\0" * 4096)
                f.flush()
                os.fsync(f.fileno())
        finally:
            if os.path.exists(probe):
                os.remove(probe)
    except OSError as e:
        raise DataError(f"{flag} {path} is not writable ({e.strerror})") from None
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free < need_bytes:
        raise DataError(f"{flag} {path} has {free / 2**20:.1f} MiB free; {purpose} about "
                        f"{need_bytes / 2**20:.1f} MiB")


def _file_above(path: str) -> str | None:
    """The nearest existing ancestor of ``path`` when it is not a directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return None if os.path.isdir(parent) else parent


def write_atomically(path: str, text: str | bytes) -> None:
    """``path`` holds ``text`` (or bytes) in full or keeps what it held: written beside it,
    then renamed; a failure (a full disk) leaves no partial file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise DataError(f"cannot write {path} ({e.strerror or e})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def staged_dir(target: str, what: str, replaces=(), log=None):
    """A directory whose contents replace ``target``'s entries of the same names only once they
    are complete: written in ``<target>/.staging-*`` (the same file system, whatever is
    mounted where), then renamed into place. A failure (a full disk), or a signal that ends the
    process (``graceful_stop.Interrupted``), removes the staging and leaves ``target`` as it
    was, with one line. The entries ``replaces`` names (the previous set's: an export replaces
    a whole export) go too when the new set lacks them, and ``log`` says so. For exports:
    SavedModel, ONNX, TF-TRT."""
    import tensorflow as tf  # its errors (a failed SavedModel write) are caught below

    os.makedirs(target, exist_ok=True)
    clear_stale(target, log)
    stage = tempfile.mkdtemp(prefix=STAGING, dir=target)
    try:
        yield stage
        written = set(os.listdir(stage))
        for name in sorted(set(replaces) - written):
            old = os.path.join(target, name)
            if os.path.isdir(old) and not os.path.islink(old):
                shutil.rmtree(old)
            elif os.path.lexists(old):
                os.remove(old)
            else:
                continue
            if log:
                log(f"removed {old}: the previous export's, which this one does not write")
        for name in os.listdir(stage):
            old = os.path.join(target, name)
            if os.path.isdir(old) and not os.path.islink(old):
                shutil.rmtree(old)
            elif os.path.lexists(old):
                os.remove(old)
            os.rename(os.path.join(stage, name), old)
    except (OSError, tf.errors.OpError) as e:
        why = one_line(getattr(e, "message", None) or e.strerror or str(e))
        raise DataError(f"cannot write {what} in {target} ({why}); nothing of it was kept "
                        "there") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


STAGING, PROBE = ".staging-", ".size-probe-"  # what an export writes before it is whole


def clear_stale(target: str, log=None) -> None:
    """Removes what an export killed before it could clean up left in ``target`` (a
    ``.staging-*`` or ``.size-probe-*`` folder: SIGKILL, a lost node), with a line each.
    Exports run on one process at a time per directory (rank 0)."""
    if not os.path.isdir(target):
        return
    for name in sorted(os.listdir(target)):
        path = os.path.join(target, name)
        if name.startswith((STAGING, PROBE)) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            if log:
                log(f"removed {path}, left by an export that was stopped before it finished")


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)
