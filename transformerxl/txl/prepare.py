"""A corpus in WikiText-103's layout -> vocabulary and token streams, with no pickle.

Input: WikiText-103 as its archive unpacks, ``CORPUS_DIR/wiki.{train,valid,test}.tokens`` (the
tokenized ``wikitext-103-v1.zip`` that NVIDIA's ``getdata.sh`` downloads), or any corpus as
``CORPUS_DIR/{train,valid,test}.txt`` (the names ``getdata.sh`` renames them to). As NVIDIA's
(and kimiyoung's) ``vocabulary.py``: the vocabulary comes from the training split alone, split
on whitespace with case kept and no minimum frequency; ``<eos>`` is index 0, then every symbol
by descending frequency (ties in order of first appearance); every line, empty ones included,
ends with ``<eos>``. A word of valid or test that train never has maps to ``<unk>``: WikiText
writes ``<unk>`` in its text, so it already has an index; any other corpus gets ``<unk>``
appended at the end of the vocabulary, and the count of such words is reported.

Output in ``OUT_DIR``: ``vocab.txt`` (one symbol a line, in index order), ``{train,valid,test}
.npy`` (int32 token ids) and ``corpus-info.json`` (vocabulary size, token counts, unknowns).
"""
from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Iterable

import numpy as np

if __name__ == "__main__":  # python -m txl.prepare: the scripts' start (common/entry.py), from
    import sys  # a wheel too, before this module's imports bring TensorFlow in unfiltered

    from common import entry
    sys.exit(entry.main_of("txl.prepare:main")("python -m txl.prepare"))

from common.data import prepare_cli
from common.errors import DataError

SPLITS = ("train", "valid", "test")
EOS, UNK = "<eos>", "<unk>"


def utf8_lines(path: str):
    """The file's lines, decoded; a byte that is not UTF-8 stops with one line naming the file
    and the byte's offset in it."""
    offset = 0
    with open(path, "rb") as f:
        for raw in f:
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: byte {offset + e.start} is not UTF-8 text ({e.reason}: "
                                f"{raw[e.start:e.start + 1].hex()})") from None
            offset += len(raw)


def _lines(path: str, log, every: int = 200_000):
    start = time.time()
    for n, line in enumerate(utf8_lines(path), 1):
        if n % every == 0:
            log(f"{os.path.basename(path)}: {n:,} lines ({n / (time.time() - start):,.0f}/s)")
        yield line.split()


def build_vocab(train_path: str, log=print) -> list[str]:
    counts = collections.Counter()
    for words in _lines(train_path, log):
        counts.update(words)
    counts.pop(EOS, None)  # a literal "<eos>" in the text is the end-of-line symbol
    return [EOS] + [w for w, _ in counts.most_common()]


def encode(path: str, index: dict, unk: int | None, log=print) -> tuple[np.ndarray, int]:
    """(int32 ids of every word and end-of-line, number of words not in the vocabulary)."""
    ids, unknown = [], 0
    for words in _lines(path, log):
        for w in words:
            i = index.get(w)
            if i is None:
                unknown += 1
                i = unk
            ids.append(i)
        ids.append(0)
    return np.asarray(ids, dtype=np.int32), unknown


# The two layouts a corpus comes in: WikiText's own file names, and getdata.sh's.
LAYOUTS = ("wiki.{}.tokens", "{}.txt")


def split_paths(corpus_dir: str) -> dict[str, str]:
    """The three splits' files, in the first layout of which ``corpus_dir`` holds any file; one
    line naming the missing ones (and the raw archive's names, which are not the recipe's)."""
    if not os.path.isdir(corpus_dir):
        raise DataError(f"{corpus_dir} is not a directory")
    for layout in LAYOUTS:
        paths = {s: os.path.join(corpus_dir, layout.format(s)) for s in SPLITS}
        present = [p for p in paths.values() if os.path.isfile(p)]
        if present:
            missing = [p for p in paths.values() if not os.path.isfile(p)]
            if missing:
                raise DataError(f"{missing[0]} does not exist (expected "
                                f"{', '.join(layout.format(s) for s in SPLITS)} in {corpus_dir})")
            return paths
    if os.path.isfile(os.path.join(corpus_dir, "wiki.train.raw")):
        raise DataError(f"{corpus_dir} holds WikiText's raw text (wiki.*.raw); the recipe reads "
                        "the tokenized release, wikitext-103-v1.zip (wiki.*.tokens)")
    raise DataError(f"{corpus_dir} holds neither wiki.train.tokens, wiki.valid.tokens and "
                    "wiki.test.tokens (WikiText-103 unpacked) nor train.txt, valid.txt and "
                    "test.txt")


def prepare(corpus_dir: str, out_dir: str, log=print) -> dict:
    paths = split_paths(corpus_dir)
    for split in ("valid", "test"):  # evaluation reads them: an empty one would fail later
        if os.path.getsize(paths[split]) == 0:
            raise DataError(f"{paths[split]} is empty (an extraction cut short?): evaluation "
                            f"reads the {split} split; unpack the corpus again")
    vocab = build_vocab(paths["train"], log)
    if len(vocab) < 2:
        raise DataError(f"{paths['train']} has no words")
    index = {w: i for i, w in enumerate(vocab)}
    unk = index.get(UNK)
    streams, unknown = {}, {}
    for split in SPLITS:
        # Words outside the vocabulary can only occur in valid and test.
        streams[split], unknown[split] = encode(paths[split], index,
                                                unk if unk is not None else len(vocab), log)
    if any(unknown.values()) and unk is None:
        vocab.append(UNK)  # index len(vocab) before the append, as encoded above
    info = {"vocab_size": len(vocab), "vocab_sha256": vocab_hash(vocab),
            "tokens": {s: int(len(v)) for s, v in streams.items()}, "unknown_words": unknown}
    with prepare_cli.staged(out_dir, log) as stage:
        with open(os.path.join(stage, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(w + "\n" for w in vocab))
        for split, ids in streams.items():
            np.save(os.path.join(stage, f"{split}.npy"), ids)
        with open(os.path.join(stage, "corpus-info.json"), "w") as f:
            json.dump(info, f, indent=1)
    log(f"vocabulary {len(vocab):,}; tokens " + ", ".join(
        f"{s} {n:,}" for s, n in info["tokens"].items())
        + (f"; words not in train: {unknown['valid']:,} valid, {unknown['test']:,} test"
           if any(unknown.values()) else ""))
    return info


def vocab_hash(words) -> str:
    """The vocabulary's words in order, hashed (16 hex digits): the token ids mean these words
    (corpus-info.json and a checkpoint's settings.json record it)."""
    import hashlib
    return hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()[:16]


def main(argv: Iterable[str] | None = None) -> int:
    def arguments(p):
        p.add_argument("corpus_dir", help="folder with WikiText-103's wiki.{train,valid,test}"
                       ".tokens, or train.txt, valid.txt and test.txt")
        p.add_argument("out_dir", help="where the vocabulary and token streams go")
    return prepare_cli.main(__doc__, arguments, lambda a: prepare(a.corpus_dir, a.out_dir), argv)
