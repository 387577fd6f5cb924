"""Checkpoints that are never lost, never silently ignored and never half-written.

* Found by scanning ``--model_dir`` for ``ckpt-N.index`` files, not by trusting TensorFlow's
  ``checkpoint`` state file (which a killed run or a copy may have lost or garbled); the state file
  is rewritten from what is on disk.
* Restored newest first. A checkpoint whose files cannot be read in full (every tensor is read,
  so a truncated or bit-flipped ``.data`` file is caught) is skipped with the reason, and moved to
  ``<model_dir>/corrupt/`` once an older one restores, so that no later save can overwrite it.
  A readable checkpoint that does not fit the model (another architecture or configuration)
  stops the run with one line: it is never overwritten by a from-scratch run.
* The layout does not depend on the precision: the optimizer is saved without its loss-scale
  wrapper, and the float16 loss scale is saved beside it, so an FP32, bfloat16 or float16 run
  resumes any of the others (the loss scale starts afresh when the checkpoint had none).
* A save that fails (a full disk) removes its own partial files, keeps every earlier
  checkpoint and ends the run with one line; leftovers of a killed save are removed at start.
"""
from __future__ import annotations

import contextlib
import gc
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf
from google.protobuf import text_format

from common.errors import DataError, TrainingError, one_line

PREFIX = "ckpt"
_INDEX = re.compile(rf"^{PREFIX}-(\d+)\.index$")
_TEMP = re.compile(rf"^{PREFIX}-\d+_temp$")
_READ_ERRORS = (tf.errors.OpError, OSError, ValueError, IndexError, RuntimeError)


def on_disk(model_dir: str) -> list[int]:
    """Step numbers of the checkpoints in ``model_dir``, newest first."""
    if not os.path.isdir(model_dir):
        return []
    steps = [int(m.group(1)) for m in map(_INDEX.match, os.listdir(model_dir)) if m]
    return sorted(steps, reverse=True)


def files_of(prefix: str) -> list[str]:
    d, base = os.path.split(prefix)
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f == base + ".index" or f.startswith(base + ".data-"))


def unreadable(prefix: str) -> str | None:
    """Why the checkpoint at ``prefix`` cannot be read in full, or None when it can."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)  # checks the tensor's CRC: a truncated .data file fails here
    except _READ_ERRORS as e:
        return f"{type(e).__name__}: {_first_line(e)[:200]}"
    return None


def nbytes(variables) -> int:
    return int(sum(np.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables))


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
def staged_dir(target: str, what: str):
    """A directory whose contents replace ``target``'s entries of the same names only once they
    are complete: written in ``<target>/.staging-*`` (the same file system, whatever is
    mounted where), then renamed into place. A failure (a full disk) removes the staging and
    leaves ``target`` as it was, with one line. For exports: SavedModel, ONNX, TF-TRT."""
    os.makedirs(target, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".staging-", dir=target)
    try:
        yield stage
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


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


class CheckpointStore:
    """Saves and restores ``objects`` (model, optimizer, step) plus optional loss-scale state."""

    def __init__(self, model_dir: str, objects: Mapping, loss_scale: Mapping | None,
                 keep: int, log: Callable[[str], None]):
        self.model_dir, self.keep, self.log = model_dir, keep, log
        self._required = tf.train.Checkpoint(**objects)
        self._loss_scale = tf.train.Checkpoint(**loss_scale) if loss_scale else None
        self._all = tf.train.Checkpoint(
            **objects, **({"loss_scale": self._loss_scale} if loss_scale else {}))
        self._manager = None
        self.latest: str | None = None

    def _prefix(self, step: int) -> str:
        return os.path.join(self.model_dir, f"{PREFIX}-{step}")

    # --- restore ----------------------------------------------------------------------------
    def clean_leftovers(self) -> None:
        if not os.path.isdir(self.model_dir):
            return
        for name in sorted(os.listdir(self.model_dir)):
            if _TEMP.match(name):
                shutil.rmtree(os.path.join(self.model_dir, name), ignore_errors=True)
                self.log(f"removed {name}, left behind by an interrupted save")

    def restore(self, required: bool, quarantine: bool) -> str | None:
        """Restores the newest readable checkpoint and returns its prefix (None: there is none).

        ``quarantine`` moves the unreadable checkpoints newer than the restored one aside (a
        training run does this; evaluation and predict only read)."""
        steps = on_disk(self.model_dir)
        if not steps:
            if required:
                raise DataError(f"no checkpoint in --model_dir {self.model_dir}: train first or "
                                "point --model_dir at a training run")
            return None
        self._warn_about_state_file(steps[0])
        skipped = []
        for step in steps:
            prefix = self._prefix(step)
            reason = unreadable(prefix)
            if reason:
                self.log(f"skipped {os.path.basename(prefix)}: it cannot be read ({reason})")
                skipped.append(prefix)
                continue
            self._restore_from(prefix)
            if skipped and quarantine:
                self._move_aside(skipped)
            self.latest = prefix
            return prefix
        raise DataError(f"none of the {len(steps)} checkpoint(s) in {self.model_dir} can be read "
                        f"(the newest, {os.path.basename(skipped[0])}, is corrupt); move them "
                        "away to start from scratch")

    def _warn_about_state_file(self, newest: int) -> None:
        try:
            state = tf.train.get_checkpoint_state(self.model_dir)
        except Exception:  # a garbled text proto raises parser errors of several types
            state = None
        listed = state.model_checkpoint_path if state else None
        if listed is None:
            self.log(f"the 'checkpoint' state file in {self.model_dir} is missing or unreadable; "
                     f"using the checkpoints found on disk (newest: {PREFIX}-{newest})")
        elif os.path.basename(listed) != f"{PREFIX}-{newest}":
            self.log(f"the 'checkpoint' state file names {os.path.basename(listed)} but "
                     f"{PREFIX}-{newest} is the newest on disk; using the files on disk")

    def _restore_from(self, prefix: str) -> None:
        mismatch = None
        try:
            status = self._required.restore(prefix)
            status.expect_partial()  # silence TensorFlow's warnings about the optional parts
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            mismatch = _first_line(e)
        if mismatch:
            _collect_quietly()  # the failed restore's leftovers would warn after our last line
            raise DataError(f"checkpoint {prefix} does not fit this model ({mismatch}): "
                            "resume with the flags it was trained with, or use another "
                            "--model_dir")
        if self._loss_scale is not None:
            if any(n.startswith("loss_scale/") for n, _ in tf.train.list_variables(prefix)):
                tf.train.Checkpoint(loss_scale=self._loss_scale).restore(prefix).expect_partial()
            else:
                self.log(f"{os.path.basename(prefix)} holds no float16 loss scale (it was "
                         "written in another precision); the loss scale starts afresh")

    def _move_aside(self, prefixes) -> None:
        corrupt = os.path.join(self.model_dir, "corrupt")
        os.makedirs(corrupt, exist_ok=True)
        for prefix in prefixes:
            for path in files_of(prefix):
                os.replace(path, os.path.join(corrupt, os.path.basename(path)))
            self.log(f"moved {os.path.basename(prefix)} to {corrupt}/ so that nothing "
                     "overwrites it")

    # --- save -------------------------------------------------------------------------------
    def _manager_or_new(self) -> tf.train.CheckpointManager:
        if self._manager is None:
            # Rewrite the state file from the files on disk first: the manager trusts it.
            self._write_state_file(sorted(on_disk(self.model_dir)))
            self._manager = tf.train.CheckpointManager(self._all, self.model_dir,
                                                       max_to_keep=self.keep,
                                                       checkpoint_name=PREFIX)
        return self._manager

    def _write_state_file(self, steps) -> None:
        """TensorFlow's ``checkpoint`` file listing ``steps`` (oldest first), written atomically.
        The manager deletes beyond ``--keep_checkpoints`` only what is listed with a timestamp."""
        if not steps:
            return
        names = [f"{PREFIX}-{s}" for s in steps]  # relative, as the manager writes them
        stamps = [os.path.getmtime(self._prefix(s) + ".index") for s in steps]
        state = tf.compat.v1.train.generate_checkpoint_state_proto(
            os.path.abspath(self.model_dir), names[-1], all_model_checkpoint_paths=names,
            all_model_checkpoint_timestamps=stamps, last_preserved_timestamp=min(stamps) - 1)
        path = os.path.join(self.model_dir, "checkpoint")
        with open(path + ".tmp", "w") as f:
            f.write(text_format.MessageToString(state))
        os.replace(path + ".tmp", path)

    def save(self, step: int) -> str:
        manager = self._manager_or_new()
        prefix = self._prefix(step)
        before = set(files_of(prefix)) if os.path.isdir(self.model_dir) else set()
        try:
            path = manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            shutil.rmtree(prefix + "_temp", ignore_errors=True)
            if not os.path.exists(prefix + ".index"):  # a save cut short: remove its pieces
                for f in set(files_of(prefix)) - before:
                    os.remove(f)
            raise TrainingError(f"cannot save checkpoint {prefix} ({_first_line(e)}); earlier "
                                f"checkpoints are kept (latest: {self.latest})") from None
        self.latest = path
        return path


def _collect_quietly() -> None:
    """Frees a failed restore's objects now, without TensorFlow's 'unrestored values' warnings."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        gc.collect()
    finally:
        logger.setLevel(level)


def _first_line(e: BaseException) -> str:
    text = getattr(e, "message", None) or str(e)
    return one_line(text)[:300] if text.strip() else type(e).__name__
