"""What a training run starts from besides its own checkpoints, and what a checkpoint directory
records for the runs that start from it (``common/checkpoint/settings.py``): the settings and
class names beside every checkpoint, the data-derived facts checked against them, and the
weights of a fine-tuning run (``--finetune_checkpoint``)."""
from __future__ import annotations

import os

from common import files
from common.checkpoint import settings as checkpoint_settings
from common.checkpoint import store


def record(task, directory: str) -> None:
    """``settings.json`` and the task's assets (its class names) in a checkpoint directory."""
    checkpoint_settings.write(directory, task.name, checkpoint_settings.settings_of(task),
                              checkpoint_settings.weights_source(task))
    data_dir = task.flags.data_dir
    for name in task.checkpoint.assets:
        source = os.path.join(data_dir or "", name)
        if not (data_dir and os.path.isfile(source)):
            continue
        target = os.path.join(directory, name)
        with open(source, "rb") as f:
            data = f.read()
        if not os.path.exists(target) or open(target, "rb").read() != data:
            files.write_atomically(target, data)


def check_facts(task, path: str, source: str) -> None:
    """The data-derived settings (a vocabulary's hash) against those of the checkpoint at
    ``path`` (a directory or prefix), when it has a record; one line naming both when they
    differ."""
    found = (checkpoint_settings.read(path)
             if store.on_disk(checkpoint_settings.directory_of(path)) else None)
    if found:
        facts = task.checkpoint_facts()
        checkpoint_settings.compare(found, {k: v for k, (v, _) in facts.items()}, source,
                                    {k: where for k, (_, where) in facts.items()})


def begin(task, model, checkpoints, required: bool, log, prefix: str | None = None
          ) -> str | None:
    """Where a run's weights start (rank 0): the newest readable checkpoint in --model_dir
    (``checkpoints``, its ``store.CheckpointStore``; a training run moves unreadable newer ones
    aside), or, for a training run with nothing to resume, --finetune_checkpoint's weights.
    Returns the checkpoint restored, or None."""
    f = task.flags
    training = f.mode in ("train", "train_and_evaluate")
    check_facts(task, f.model_dir, f"the checkpoint in --model_dir {f.model_dir}")
    path = checkpoints.restore(required, quarantine=training, prefix=prefix)
    if path is None and training and f.finetune_checkpoint:
        finetune(task, model, f.finetune_checkpoint, log)
    elif path and f.finetune_checkpoint:
        log(f"--finetune_checkpoint {f.finetune_checkpoint} not read: resuming the run in "
            f"{f.model_dir}")
    return path


def finetunes(settings) -> bool:
    """Whether the run starts from a fine-tuning checkpoint's weights (a model's own flags that
    also give weights, SSD320's --backbone_checkpoint, must not be given with it)."""
    return bool(settings.finetune_checkpoint)


def finetune(task, model, path: str, log) -> None:
    """``model``'s weights from the checkpoint at ``path``; step, optimizer and schedule start
    afresh, and so do the task's heads whose shapes differ (``CheckpointSpec.fresh_heads``), with a
    line each."""
    flag = f"--finetune_checkpoint {path}"
    prefix = store.resolve(path, "--finetune_checkpoint")
    found = checkpoint_settings.read(prefix)
    check_facts(task, prefix, flag)
    source = task.build_model_like(found["settings"] if found else {})
    fresh = store.load_weights(model, source, prefix, flag, task.checkpoint.fresh_heads, log)
    log(f"fine-tuning from {prefix}: its weights, step 0, a fresh optimizer and schedule")
    for layer in fresh:
        log(f"{layer} starts afresh: its shape in the checkpoint differs (another number of "
            "classes)")
