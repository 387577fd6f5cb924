"""Files that are written whole or not at all, and directories checked before a run needs
them: what checkpoints, exports, predictions, drawings, op tables and settings records share.

* ``check_output_dir``: a directory that is a file, read-only or full stops a run at its start
  with one line, not at the first write an epoch later.
* ``write_atomically``: a file holds the new text in full or keeps what it held.
* ``staged_dir``: a directory's new contents replace the old only once complete, in one step.
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
    """A directory written beside ``target`` (``<parent>/.<name>.staging-*``: the same file
    system) and put in its place whole, in one step: Linux's ``renameat2(RENAME_EXCHANGE)``
    swaps the two directories atomically, so ``target`` holds the earlier contents or the new
    ones at every instant, whatever stops the process (SIGKILL, a lost node). Where the file
    system cannot exchange (NFS, some parallel file systems), the earlier directory is renamed
    aside and the new one into place, and a kill between the two renames is undone by the next
    run (``recover``). Stop signals are held over the swap (``graceful_stop.deferred``), and
    Ctrl-C stops as SIGTERM does; the run's last line says which export is in place.

    Entries of ``target`` that no export writes (a user's notes) are carried into the new
    directory by hard links (copies where the file system has none); those ``replaces`` names
    (the previous set's: an export replaces a whole export) are not, and ``log`` says so. A
    failure (a full disk) removes the staging and leaves ``target`` as it was, with one line.
    For exports: SavedModel, ONNX, TF-TRT, the Triton model repository."""
    import tensorflow as tf  # its errors (a failed SavedModel write) are caught below

    from common.runtime import graceful_stop

    target = swap_target(target, what)
    parent, base = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    with _writer(target, wait=True, log=log):  # one writer at a time
        _recover(target, log)
        existed = os.path.isdir(target)
        graceful_stop.set_phase(f"while writing {what} to {target} (not written; "
                                + ("the earlier one there is as it was)" if existed else
                                   "nothing was there)"))
        stage = tempfile.mkdtemp(prefix=f".{base}{STAGING}", dir=parent)
        old = None
        try:
            with graceful_stop.sigint_stops():
                yield stage
                if existed:
                    _carry_over(target, stage, set(replaces), log)
                _keep_mode(stage, target if existed else None)
                with graceful_stop.deferred():  # one step: SIGTERM and Ctrl-C wait for it
                    # A kill from here on leaves a whole one, named so, with its directory's inode:
                    # once exchanged, the name holds the earlier contents, another inode
                    # (``recover`` tells the two apart).
                    whole = stage.replace(f"{base}{STAGING}", f"{base}{WHOLE}", 1) + \
                        f"-{os.stat(stage).st_ino}"
                    os.rename(stage, whole)
                    stage = whole
                    old = _swap_in(stage, target, existed)
                    graceful_stop.written(f"{what} in {target} is the new one, whole")
                    graceful_stop.set_phase(f"after writing {what} to {target}")
        except (OSError, tf.errors.OpError) as e:
            why = one_line(getattr(e, "message", None) or e.strerror or str(e))
            raise DataError(f"cannot write {what} in {target} ({why}); nothing of it was kept "
                            "there") from None
        finally:
            shutil.rmtree(stage if old is None else old, ignore_errors=True)


@contextlib.contextmanager
def one_writer(target: str, log=None):
    """Waits until no other process writes ``target`` (``_writer``'s lock, which
    ``staged_dir`` holds over a whole export), and holds it for the block."""
    with _writer(os.path.realpath(target.rstrip(os.sep) or os.sep), wait=True, log=log):
        yield


def swap_target(target: str, what: str) -> str:
    """The directory a swap replaces for ``target``: where a symbolic link points (the link
    stays, and a server reading through it sees the new contents), as an absolute path. A mount
    point cannot be swapped (the staging beside it is on another file system, and a mount
    point is not renamed): one line."""
    target = os.path.realpath(target.rstrip(os.sep) or os.sep)
    if os.path.ismount(target):
        raise DataError(f"{target} is a mount point: {what} is written beside its directory "
                        "and swapped in whole, which a mount point cannot take; give a "
                        f"directory inside it ({os.path.join(target, 'export')})")
    return target


def _keep_mode(stage: str, target: str | None) -> None:
    """``stage`` (``mkdtemp``'s, mode 0700) with the mode and group of the ``target`` it
    replaces, or for a new one the mode the umask gives a new directory: a serving container
    of another user, or a shared volume's group, reads the export as it read the earlier."""
    import stat
    if target is None:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(stage, 0o777 & ~umask | (os.stat(stage).st_mode & stat.S_ISGID))
        return
    st = os.stat(target)
    try:
        os.chown(stage, -1, st.st_gid)
    except PermissionError:
        pass  # a group the user is not in: the mode still holds
    os.chmod(stage, stat.S_IMODE(st.st_mode))


STAGING, OLD, PROBE = ".staging-", ".replaced-", ".size-probe-"  # an export's work beside it
WHOLE = ".whole-"  # a staging written in full, about to go in place
RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: str, b: str) -> bool:
    """Swaps two directories in one step (``renameat2`` with ``RENAME_EXCHANGE``); False where
    the C library or the file system cannot."""
    import ctypes
    import errno
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), b)


def _swap_in(stage: str, target: str, existed: bool) -> str | None:
    """Puts ``stage`` at ``target``; returns where the earlier contents went (to be removed)."""
    if not existed:
        os.rename(stage, target)
        return None
    parent, base = os.path.split(os.path.abspath(target))
    if _exchange(stage, target):  # stage now holds the earlier contents
        old = tempfile.mkdtemp(prefix=f".{base}{OLD}", dir=parent)
        os.rename(stage, os.path.join(old, base))
        return old
    old = tempfile.mkdtemp(prefix=f".{base}{OLD}", dir=parent)
    os.rename(target, os.path.join(old, base))  # a kill here: recover() puts it back
    os.rename(stage, target)
    return old


def _carry_over(target: str, stage: str, replaced: set[str], log) -> None:
    """The entries of ``target`` that are not the export's, into ``stage``; the previous
    export's that this one does not write are left behind, with a line."""
    written = set(os.listdir(stage))
    for name in sorted(os.listdir(target)):
        if name in written or name.startswith((STAGING, PROBE)):
            continue
        if name in replaced:
            if log:
                log(f"removed {os.path.join(target, name)}: the previous export's, which this "
                    "one does not write")
            continue
        src, dst = os.path.join(target, name), os.path.join(stage, name)
        if os.path.isdir(src) and not os.path.islink(src):
            shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
        else:
            link_or_copy(src, dst)


def link_or_copy(src: str, dst: str) -> None:
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


LOCK = ".lock"  # beside the target, held by its one writer (``_writer``)


@contextlib.contextmanager
def _writer(target: str, wait: bool, log=None):
    """Holds ``<parent>/.<name>.lock`` (``flock``) while ``target`` is written, so that two
    processes writing it (two runs exporting to one directory) take turns, and neither takes
    the other's work in progress for a stopped write. Yields whether it holds it: without
    ``wait``, False at once where another process does. The file is removed by its holder
    (a kill leaves it, harmless: the kernel releases the lock with the process); a waiter that
    then finds its file gone takes the new one. Where it cannot be made (a read-only parent),
    nothing is held and nothing can be written there either."""
    import fcntl
    parent, base = os.path.split(target)
    path = os.path.join(parent, f".{base}{LOCK}")
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield True
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                os.close(fd)
                yield False
                return
            if log:
                log(f"waiting for another process writing {target} to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it meanwhile: lock the one there now
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def recover(target: str, log=None) -> None:
    """What an earlier write of ``target`` left when it was stopped: a swap cut between its two
    renames (the earlier contents put back, said), earlier contents not yet removed (removed),
    a staging folder not yet whole (removed), a whole one that never went in place (kept and
    named), and trial exports (removed). While another process is writing ``target``, what is beside
    it is that write's, and is left alone (said)."""
    target = os.path.realpath(target.rstrip(os.sep) or os.sep)
    if not os.path.isdir(os.path.dirname(target)):
        return
    with _writer(target, wait=False) as alone:
        if alone:
            _recover(target, log)
        elif log:
            log(f"note: another process is writing {target} now; what it has beside it is "
                "left as it is")


def _recover(target: str, log=None) -> None:
    """``recover``'s work, by the one writer of ``target``."""
    parent, base = os.path.split(target)
    if not os.path.isdir(parent):
        return
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if name.startswith(f".{base}{OLD}") and os.path.isdir(path):
            inner = os.path.join(path, base)
            if os.path.isdir(inner) and _holds_nothing(target):
                # A start-up check may have made an empty target since (check_output_dir):
                # that is no export; the one aside is.
                if os.path.isdir(target):
                    shutil.rmtree(target)
                os.rename(inner, target)
                if log:
                    log(f"put back {target}: a stop between the two renames of its swap had "
                        f"left it aside in {path}")
            shutil.rmtree(path, ignore_errors=True)
        elif name.startswith(f".{base}{STAGING}") and os.path.isdir(path):
            # Never a whole write (a whole one is renamed .whole-* before its swap), and no
            # writer holds it (this runs under the writers' lock): each later run named it and
            # left it, a full export's size, for ever.
            shutil.rmtree(path, ignore_errors=True)
            if log:
                log(f"removed {path}: a write of {target} that was stopped before it was whole")
        elif name.startswith(f".{base}{WHOLE}") and os.path.isdir(path):
            if _swapped_out(path):  # the exchange happened: this is the earlier export
                shutil.rmtree(path, ignore_errors=True)
                if log:
                    log(f"removed {path}: the earlier {base}, swapped out by a write that was "
                        f"stopped just after it went in place (the one in {target} is the new "
                        "one, whole)")
            elif log:
                log(f"{path}: a whole write of {target}, stopped just before it went in place "
                    "(not used: the one in place is the earlier): remove it when you no longer "
                    "need it")
    clear_stale(target, log)


def _swapped_out(whole: str) -> bool:
    """Whether a ``.whole-*-INODE`` directory holds what its swap took out of place: its
    name carries the inode of the write it was named for, and an exchange gave the name the
    earlier directory (another inode)."""
    suffix = whole.rsplit("-", 1)[-1]
    return suffix.isdigit() and os.stat(whole).st_ino != int(suffix)


def _holds_nothing(target: str) -> bool:
    """``target`` absent, or a directory of nothing but what a stopped run leaves (trial
    exports, write probes)."""
    if not os.path.lexists(target):
        return True
    return os.path.isdir(target) and all(
        n.startswith((STAGING, PROBE, ".write_probe.")) for n in os.listdir(target))


def clear_stale(target: str, log=None) -> None:
    """Removes trial exports (``.size-probe-*``) a killed run left in ``target``, and the
    staging folders of earlier versions of these scripts (inside it), with a line each."""
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
