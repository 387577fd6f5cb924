"""What evaluation scored at each step, kept in ``--model_dir`` (``scores.json``): an export of
a checkpoint that an earlier run evaluated (evaluate, then predict with ``--export_dir``, as the
README's steps go) carries the figures into its model card, as the exporting run's own
evaluation would."""
from __future__ import annotations

import json
import os

FILE = "scores.json"
KEEP = 100  # the newest steps' scores; a long run evaluates every epoch


def of(results: dict, *, split: str, step: int, data: str | None, counts) -> dict:
    """What an evaluation scored, as the model card and ``scores.json`` keep it: the model's
    quality (``metrics``) apart from what the pass counted and its speed on this machine
    (``counts``: ``evaluated``), the split, the step and the data (its directory's name)."""
    plain = json.loads(json.dumps(results, default=float))
    return {"split": split, "step": step, "data": data,
            "metrics": {k: v for k, v in plain.items() if k not in counts},
            "evaluated": {k: v for k, v in plain.items() if k in counts}}


def read(model_dir: str | None) -> dict:
    """{step (str): what evaluation scored there}; {} where there is none or it is unreadable."""
    try:
        with open(os.path.join(model_dir or "", FILE), encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def at(model_dir: str | None, step: int) -> dict | None:
    """What evaluation scored at ``step`` in ``model_dir``, or None."""
    found = read(model_dir).get(str(step))
    return found if isinstance(found, dict) else None


def record(model_dir: str, scored: dict, log) -> None:
    """Adds ``scored`` (at ``scored["step"]``) to ``model_dir``'s record, written whole. A
    directory that cannot be written (a read-only checkpoint) costs a note, not the run."""
    from common.files import write_atomically
    kept = read(model_dir)
    kept[str(scored["step"])] = scored
    newest = sorted(kept, key=lambda s: int(s) if s.isdigit() else -1)[-KEEP:]
    try:
        write_atomically(os.path.join(model_dir, FILE),
                         json.dumps({s: kept[s] for s in newest}, indent=1) + "\n")
    except OSError as e:
        log(f"note: the scores were not recorded in {model_dir} ({e.strerror or e}): an "
            "export of this checkpoint by a later run will not carry them")
