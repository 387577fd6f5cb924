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
* A checkpoint may hold weights only (``write_weights``: an imported or a fine-tuning start
  point, no optimizer state): it restores the model and step, and the optimizer starts afresh.
* ``load_weights`` copies a checkpoint's weights into another model of the same layers (a
  fine-tuning run's), starting afresh the layers a task names when their shapes differ.
"""
from __future__ import annotations

import gc
import os
import re
import shutil
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


def count(variables) -> int:
    """Parameters in ``variables``."""
    return int(sum(np.prod(v.shape) for v in variables))


def nbytes(variables) -> int:
    return int(sum(np.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables))


class CheckpointStore:
    """Saves and restores ``objects`` (model, optimizer, step) plus optional loss-scale state."""

    def __init__(self, model_dir: str, objects: Mapping, loss_scale: Mapping | None,
                 keep: int, log: Callable[[str], None]):
        self.model_dir, self.keep, self.log = model_dir, keep, log
        self._required = tf.train.Checkpoint(**objects)
        self._weights = tf.train.Checkpoint(
            **{k: v for k, v in objects.items() if k in ("model", "global_step")})
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

    def restore(self, required: bool, quarantine: bool, prefix: str | None = None
                ) -> str | None:
        """Restores the newest readable checkpoint and returns its prefix (None: there is none);
        with ``prefix``, that one (``DIR/ckpt-N``: the Python API's load of a given step), or
        one line why it cannot be read.

        ``quarantine`` moves the unreadable checkpoints newer than the restored one aside (a
        training run does this; evaluation and predict only read)."""
        if prefix is not None:
            reason = unreadable(prefix)
            if reason:
                raise DataError(f"checkpoint {prefix} cannot be read ({reason})")
            self._restore_from(prefix)
            self.latest = prefix
            return prefix
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
        weights_only = not holds_optimizer(prefix)
        try:
            status = (self._weights if weights_only else self._required).restore(prefix)
            status.expect_partial()  # silence TensorFlow's warnings about the optional parts
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            mismatch = _first_line(e)
        if mismatch:
            _collect_quietly()  # the failed restore's leftovers would warn after our last line
            raise DataError(f"checkpoint {prefix} does not fit this model ({mismatch}): "
                            "resume with the flags it was trained with, or use another "
                            "--model_dir")
        if weights_only:
            self.log(f"{os.path.basename(prefix)} holds weights only (no optimizer state); the "
                     "optimizer starts afresh")
            return
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


def holds_optimizer(prefix: str) -> bool:
    """Whether the checkpoint holds an optimizer's state (a training run's does; a weights-only
    one, ``write_weights``, does not)."""
    return any(n.startswith("optimizer/") for n, _ in tf.train.list_variables(prefix))


def resolve(path: str, flag: str) -> str:
    """The checkpoint prefix ``path`` names: a prefix, or a directory's newest ``ckpt-N``."""
    if os.path.isdir(path):
        steps = on_disk(path)
        if not steps:
            raise DataError(f"{flag} {path} holds no {PREFIX}-N checkpoint")
        return os.path.join(path, f"{PREFIX}-{steps[0]}")
    if not os.path.exists(path + ".index"):
        raise DataError(f"{flag} {path} is neither a checkpoint prefix (DIR/{PREFIX}-N) nor a "
                        "directory of checkpoints")
    return path


def write_weights(model_dir: str, model, step: int = 0) -> str:
    """A weights-only checkpoint of ``model`` at ``step`` as ``model_dir/ckpt-<step>`` (with
    TensorFlow's state file): what an importer writes, and what evaluate, predict, export,
    fine-tuning and resuming read like any other."""
    os.makedirs(model_dir, exist_ok=True)
    ckpt = tf.train.Checkpoint(model=model, global_step=tf.Variable(step, dtype=tf.int64))
    manager = tf.train.CheckpointManager(ckpt, model_dir, max_to_keep=None,
                                         checkpoint_name=PREFIX)
    return manager.save(checkpoint_number=step)


def load_weights(model, source, prefix: str, flag: str, replaceable=(),
                 log: Callable[[str], None] = print) -> list[str]:
    """Restores the checkpoint at ``prefix`` into ``source`` (a model built as the checkpoint
    was: ``Task.build_model_like``), then copies it into ``model`` weight by weight; a weight
    of a layer in ``replaceable`` whose shape differs keeps ``model``'s fresh value (the layers
    so started are returned); any other difference stops with one line naming ``flag``."""
    reason = unreadable(prefix)
    if reason:
        raise DataError(f"{flag} {prefix} cannot be read ({reason})")
    failure = None
    try:
        status = tf.train.Checkpoint(model=source).restore(prefix)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        failure = _first_line(e)
    if failure:
        _collect_quietly()
        raise DataError(f"{flag} {prefix} does not fit this model ({failure})")
    if len(source.weights) != len(model.weights):
        raise DataError(f"{flag} {prefix} holds {len(source.weights)} weights; this model has "
                        f"{len(model.weights)}")
    fresh = []
    for src, dst in zip(source.weights, model.weights):
        if tuple(src.shape) == tuple(dst.shape):
            dst.assign(src)
            continue
        layer = dst.path.split("/")[0]
        if layer not in replaceable:
            raise DataError(f"{flag} {prefix}: {dst.path} is {tuple(src.shape)} there, "
                            f"{tuple(dst.shape)} here")
        if layer not in fresh:
            fresh.append(layer)
    return fresh


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
