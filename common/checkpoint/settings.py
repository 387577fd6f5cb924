"""What a checkpoint is: the settings that shape its variables and what they compute
(architecture, classes, image size, trunk, padding, vocabulary), recorded beside it in
``settings.json`` when it is written, and read back by every run that starts from it.

A run that restores a checkpoint directory (resume, evaluate, predict, and the export that
follows them) takes an omitted setting from it and refuses a flag that contradicts it, with one
line naming the flag and the checkpoint's value; a fine-tuning run takes the settings that make
the weights fit (``CheckpointSpec.finetune``). Without this, a model built from the wrong flags only
found out at the restore, in TensorFlow's words ("does not fit this model"), after a screen of
warnings. Checkpoints written before this file existed have none: they are read as before.

No TensorFlow here: the settings are read before the model is built.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping

from common.errors import DataError, UsageError

FILE = "settings.json"
VERSION = 1


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """What a model's checkpoint is, declared once by its Task (``Task.checkpoint``); the
    settings read from its data (a vocabulary's hash) are ``Task.checkpoint_facts``."""
    # The flags that shape the model's variables or what they compute: recorded beside every
    # checkpoint; a run that restores one takes them from it when omitted and refuses a flag
    # that contradicts them.
    flags: tuple[str, ...] = ()
    # Those of them a fine-tuning run takes from its --finetune_checkpoint (the ones the
    # weights cannot do without: the architecture, not the classes or the image size).
    finetune: tuple[str, ...] = ()
    # Layers a fine-tuning run starts afresh, with a line, when the checkpoint's differ in
    # shape (a classifier for another number of classes).
    fresh_heads: tuple[str, ...] = ()
    # Files of --data_dir copied beside every checkpoint when there (the class names), so that
    # predict and export find them without the data.
    assets: tuple[str, ...] = ()
    # Settings recorded beside every checkpoint that a run starting from it (restored or
    # fine-tuned) takes when the flag is omitted, and that a given flag overrides (how
    # evaluation prepares an image: the imported weights' recipe, or NVIDIA's).
    preferred: tuple[str, ...] = ()


def settings_of(task) -> dict:
    """The settings of a checkpoint of ``task``'s model: its spec's flags as the run uses them
    and the facts read from its data. What ``settings.json`` beside every checkpoint and an
    export's ``client.json`` record."""
    facts = {name: value for name, (value, _) in task.checkpoint_facts().items()}
    spec = task.checkpoint
    preferred = {n: getattr(task.flags, n) for n in spec.preferred
                 if getattr(task.flags, n) is not None}  # unset: the model's default
    return {**{n: getattr(task.flags, n) for n in spec.flags}, **preferred, **facts}


def adopted(task_cls, fv) -> tuple[dict, str] | None:
    """What the run takes from the checkpoint it starts from, and that checkpoint's name: the
    one in --model_dir when the mode restores it, else a training run's --finetune_checkpoint
    (only the settings its weights need). A flag that contradicts the checkpoint stops here,
    before a model is built."""
    from common.checkpoint import store
    spec = task_cls.checkpoint
    if fv.mode in ("train", "train_and_evaluate", "evaluate", "predict") and \
            store.on_disk(fv.model_dir):
        source, names = f"the checkpoint in --model_dir {fv.model_dir}", spec.flags
        found = read(fv.model_dir)
    elif fv.finetune_checkpoint:
        source, names = f"--finetune_checkpoint {fv.finetune_checkpoint}", spec.finetune
        found = read(fv.finetune_checkpoint)
    else:
        return None
    if found is None:
        return None
    taken = adopt(fv, found, names, source, task_cls.name)
    for name in spec.preferred:  # the checkpoint's where the command line says nothing
        value = found["settings"].get(name)
        if value is not None and not fv.given(name):
            refused = fv.refuses(name, value)
            if refused:
                raise DataError(f"{source}'s {FILE} records {name} {_show(value)}, which "
                                f"--{name} does not take ({refused}): the record was edited "
                                "or damaged; restore it from a copy, or delete it to read the "
                                "checkpoint without it")
            taken[name] = value
    return taken, source


def directory_of(path: str) -> str:
    """The directory of a checkpoint given as a directory or as a prefix (``DIR/ckpt-N``)."""
    return path if os.path.isdir(path) else os.path.dirname(path) or "."


def read(path: str) -> dict | None:
    """The record beside the checkpoint at ``path`` (a directory or a prefix):
    ``{"model": ..., "settings": {...}}``, or None where there is none."""
    file = os.path.join(directory_of(path), FILE)
    if not os.path.exists(file):
        return None
    try:
        with open(file, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{file} cannot be read ({e}); it says what the checkpoint beside it is: "
                        "restore it from a copy, or delete it to read the checkpoint without it"
                        ) from None
    if (not isinstance(record, dict) or not isinstance(record.get("settings"), dict)
            or not isinstance(record.get("model"), str)):
        raise DataError(f"{file} is not a checkpoint settings record (no model and settings)")
    return record


def record(model: str, settings: Mapping, source: Mapping | None = None) -> dict:
    """The record; ``source``, where the weights come from (``weights_source``;
    ``import_weights.py``'s source and its licence), goes into exports' model cards."""
    out = {"format": VERSION, "model": model, "settings": dict(sorted(settings.items()))}
    if source:
        out["source"] = dict(source)
    return out


def write(directory: str, model: str, settings: Mapping, source: Mapping | None = None
          ) -> None:
    """Writes the record into ``directory`` (atomically) unless it already holds this one."""
    new = record(model, settings, source)
    file = os.path.join(directory, FILE)
    try:
        with open(file, encoding="utf-8") as f:
            if json.load(f) == new:
                return
    except (OSError, ValueError):
        pass
    from common.files import write_atomically
    write_atomically(file, json.dumps(new, indent=1) + "\n")


def _show(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return [str(x) for x in (a or [])] == [str(x) for x in (b or [])]
    return a == b


def adopt(settings, found: Mapping, names: Iterable[str], source: str, model: str) -> dict:
    """The settings of ``names`` that ``found`` (a ``read`` record) holds, to be used where the
    command line did not give them; a given flag that differs raises ``UsageError`` naming both
    values. ``source`` names the checkpoint in the message."""
    if found["model"] != model:
        raise UsageError(f"{source} holds a {found['model']} checkpoint, not {model}'s "
                         f"({FILE}): point the flag at a {model} checkpoint")
    recorded, out = found["settings"], {}
    for name in names:
        if name not in recorded:
            continue
        value = recorded[name]
        refused = settings.refuses(name, value) if value is not None else None
        if refused:  # an edited or damaged record: the flags' checks hold for it too
            raise DataError(f"{source}'s {FILE} records {name} {_show(value)}, which --{name} "
                            f"does not take ({refused}): the record was edited or damaged; "
                            "restore it from a copy, or delete it to read the checkpoint "
                            "without it")
        if settings.given(name):
            if not _same(getattr(settings, name), value):
                raise UsageError(f"--{name} {_show(getattr(settings, name))} contradicts "
                                 f"{source}, written with --{name} {_show(value)}: drop the "
                                 "flag (it is taken from the checkpoint) or use another "
                                 "checkpoint")
        else:
            out[name] = value
    return out


def compare(found: Mapping, values: Mapping, source: str, explain: Mapping[str, str]) -> None:
    """Raises ``DataError`` when a setting derived from the data (``values``: a vocabulary's
    hash, say) differs from the checkpoint's; ``explain`` says where each value came from."""
    for name, value in values.items():
        recorded = found["settings"].get(name)
        if recorded is not None and not _same(recorded, value):
            raise DataError(f"{explain.get(name, name)} ({name} {_show(value)}) is not what "
                            f"{source} was trained on ({name} {_show(recorded)})")


# --- where the weights come from, as a model card says it (never a path of this machine) ----
def dir_name(path: str | None) -> str | None:
    """A directory's own name: what a card says of it, never a path of this machine."""
    return path and os.path.basename(os.path.normpath(path))


def public(source: dict) -> dict:
    """A recorded source without this machine's paths: a record written before the cards named
    files by name keeps its file's name (``file`` -> ``file_name``)."""
    out = {k: v for k, v in source.items() if k != "file"}
    if source.get("file") and "file_name" not in out:
        out["file_name"] = os.path.basename(source["file"])
    return out


def weights_source(task) -> dict:
    """Where the weights of the run's checkpoints come from: what the checkpoint in
    --model_dir recorded (a resumed run's, an imported one's), else the --finetune_checkpoint
    it started from (and that one's source), else this repository's training on --data_dir.
    Directories by their own names: the record goes into model cards that leave the machine."""
    f = task.flags
    for path, fine_tuned in ((f.model_dir, False), (f.finetune_checkpoint, True)):
        found = read(path) if path and os.path.exists(directory_of(path)) else None
        if found and found.get("source"):
            return ({**public(found["source"]), "fine_tuned_from": dir_name(path),
                     "fine_tuned_on": dir_name(f.data_dir)} if fine_tuned
                    else public(found["source"]))
        if fine_tuned and path:
            return {"source": "fine-tuned", "fine_tuned_from": dir_name(path),
                    "fine_tuned_on": dir_name(f.data_dir)}
    return {"source": "trained", "from": f"trained by this repository's {task.name}/main.py",
            "model": task.name, "dataset": dir_name(f.data_dir)}


# --- what evaluation scored at each step, kept beside the checkpoints (``scores.json``): an
# export of a checkpoint that an earlier run evaluated (evaluate, then predict with
# --export_dir, as the README's steps go) carries the figures into its model card, as the
# exporting run's own evaluation would.
SCORES = "scores.json"
KEEP_SCORES = 100  # the newest steps' scores; a long run evaluates every epoch


def scores_of(results: dict, *, split: str, step: int, data: str | None, counts) -> dict:
    """What an evaluation scored, as the model card and ``scores.json`` keep it: the model's
    quality (``metrics``) apart from what the pass counted and its speed on this machine
    (``counts``: ``evaluated``), the split, the step and the data (its directory's name)."""
    plain = json.loads(json.dumps(results, default=float))
    return {"split": split, "step": step, "data": data,
            "metrics": {k: v for k, v in plain.items() if k not in counts},
            "evaluated": {k: v for k, v in plain.items() if k in counts}}


def read_scores(model_dir: str | None, strict: bool = False) -> dict:
    """{step (str): what evaluation scored there}; {} where there is none. One that does not
    read as evaluation's record is {} too, or with ``strict`` a ``DataError`` naming it: a card
    made from it would drop the scores without a word."""
    path = os.path.join(model_dir or "", SCORES)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
        if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
            raise ValueError("not a table of steps' scores")
    except (OSError, ValueError) as e:
        if strict:
            raise DataError(f"{path} is not what evaluation recorded ({e}): move it away, or "
                            "evaluate the checkpoint again to record its scores") from None
        return {}
    return found


def scores_at(model_dir: str | None, step: int) -> dict | None:
    """What evaluation scored at ``step`` in ``model_dir``, or None."""
    return read_scores(model_dir, strict=True).get(str(step))


def record_scores(model_dir: str, scored: dict, log) -> None:
    """Adds ``scored`` (at ``scored["step"]``) to ``model_dir``'s ``scores.json``, written whole. A
    directory that cannot be written (a read-only checkpoint) costs a note, not the run."""
    from common.files import write_atomically
    kept = read_scores(model_dir)
    kept[str(scored["step"])] = scored
    newest = sorted(kept, key=lambda s: int(s) if s.isdigit() else -1)[-KEEP_SCORES:]
    try:
        write_atomically(os.path.join(model_dir, SCORES),
                         json.dumps({s: kept[s] for s in newest}, indent=1) + "\n")
    except OSError as e:
        log(f"note: the scores were not recorded in {model_dir} ({e.strerror or e}): an "
            "export of this checkpoint by a later run will not carry them")
