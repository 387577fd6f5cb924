"""What a training run starts from besides its own checkpoints, and what a checkpoint directory
records for the runs that start from it (``common/checkpoint/settings.py``): the settings and
class names beside every checkpoint, the data-derived facts checked against them, and the
weights of a fine-tuning run (``--finetune_checkpoint``)."""
from __future__ import annotations

import os

from common import files
from common.checkpoint import settings as checkpoint_settings
from common.checkpoint import store


def record(task, flags, directory: str) -> None:
    """``settings.json`` and the task's assets (its class names) in a checkpoint directory."""
    values = {name: getattr(flags, name) for name in task.checkpoint_flags}
    checkpoint_settings.write(directory, task.name, {**values, **task.checkpoint_facts()})
    for name, source in task.checkpoint_assets().items():
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
        checkpoint_settings.compare(found, task.checkpoint_facts(), source,
                                    task.checkpoint_fact_sources())


def finetune(task, model, path: str, log) -> None:
    """``model``'s weights from the checkpoint at ``path``; step, optimizer and schedule start
    afresh, and so do the task's heads whose shapes differ (``Task.finetune_heads``), with a
    line each."""
    flag = f"--finetune_checkpoint {path}"
    prefix = store.resolve(path, "--finetune_checkpoint")
    found = checkpoint_settings.read(prefix)
    check_facts(task, prefix, flag)
    source = task.build_model_like(found["settings"] if found else {})
    fresh = store.load_weights(model, source, prefix, flag, task.finetune_heads, log)
    log(f"fine-tuning from {prefix}: its weights, step 0, a fresh optimizer and schedule")
    for layer in fresh:
        log(f"{layer} starts afresh: its shape in the checkpoint differs (another number of "
            "classes)")
