"""Transformer-XL's data preparation: vocabulary order, <eos> per line, <unk>, no pickle."""
import json
import os
import sys

import numpy as np
import pytest
from conftest import ROOT, run_cli, stderr_last_line

from txl import prepare

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file

PREPARE = os.path.join(ROOT, "transformerxl", "prepare_dataset.py")


def _corpus(root, train, valid, test):
    root.mkdir()
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (root / f"{name}.txt").write_text(text)
    return root


def test_vocabulary_order_eos_and_streams(tmp_path):
    corpus = _corpus(tmp_path / "c", " b a A\n\n a b a\n", " a b\n", " A\n")
    info = prepare.prepare(str(corpus), str(tmp_path / "out"), log=lambda *_: None)
    vocab = (tmp_path / "out" / "vocab.txt").read_text().splitlines()
    assert vocab == ["<eos>", "a", "b", "A"]  # <eos> first, then by frequency, case kept
    train = np.load(tmp_path / "out" / "train.npy", allow_pickle=False)
    assert train.dtype == np.int32
    assert train.tolist() == [2, 1, 3, 0, 0, 1, 2, 1, 0]  # the empty line gets <eos> too
    assert np.load(tmp_path / "out" / "test.npy").tolist() == [3, 0]
    assert info == json.loads((tmp_path / "out" / "corpus-info.json").read_text())
    assert info["vocab_size"] == 4 and info["unknown_words"] == {"train": 0, "valid": 0, "test": 0}


def test_words_not_in_train_map_to_unk(tmp_path):
    with_unk = _corpus(tmp_path / "w", " a <unk> a\n", " zz a\n", " a\n")  # WikiText style
    info = prepare.prepare(str(with_unk), str(tmp_path / "o1"), log=lambda *_: None)
    assert info["vocab_size"] == 3 and info["unknown_words"]["valid"] == 1
    assert np.load(tmp_path / "o1" / "valid.npy").tolist() == [2, 1, 0]
    plain = _corpus(tmp_path / "p", " a b\n", " a zz yy\n", " b\n")
    info = prepare.prepare(str(plain), str(tmp_path / "o2"), log=lambda *_: None)
    assert (tmp_path / "o2" / "vocab.txt").read_text().splitlines()[-1] == "<unk>"
    assert np.load(tmp_path / "o2" / "valid.npy").tolist() == [1, 3, 3, 0]


def test_missing_split_stops_with_one_line(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "train.txt").write_text("a\n")
    proc = run_cli([sys.executable, PREPARE, str(tmp_path / "c"), str(tmp_path / "out")])
    assert proc.returncode == 1
    assert stderr_last_line(proc).startswith(
        f"prepare_dataset.py: error: {tmp_path / 'c'}/valid.txt")


@pytest.mark.one_stack("pip", "the archive is unpacked by the shell; the preparation is tested "
                        "on both stacks elsewhere")
def test_wikitext_103_as_its_archive_unpacks(tmp_path):
    """wikitext-103-v1.zip unpacks to wikitext-103/wiki.{train,valid,test}.tokens, which the
    README's quick start names: they convert as train/valid/test.txt do (it used to exit 1,
    "train.txt does not exist")."""
    corpus = tmp_path / "wikitext-103"
    corpus.mkdir()
    text = {"train": " = Valkyria = \n\n a b <unk> a\n", "valid": " a zz\n", "test": " b\n"}
    for split, body in text.items():
        (corpus / f"wiki.{split}.tokens").write_text(body)
    proc = run_cli([sys.executable, PREPARE, str(corpus), str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    for split, body in text.items():
        (plain / f"{split}.txt").write_text(body)
    prepare.prepare(str(plain), str(tmp_path / "out2"), log=lambda *_: None)
    for name in ("vocab.txt", "train.npy", "valid.npy", "test.npy"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "out2" / name).read_bytes()
    (corpus / "wiki.test.tokens").unlink()
    proc = run_cli([sys.executable, PREPARE, str(corpus), str(tmp_path / "out3")])
    assert proc.returncode == 1 and stderr_last_line(proc) == (
        f"prepare_dataset.py: error: {corpus}/wiki.test.tokens does not exist (expected "
        f"wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens in {corpus})")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "wiki.train.raw").write_text("A b\n")
    proc = run_cli([sys.executable, PREPARE, str(raw), str(tmp_path / "out4")])
    assert proc.returncode == 1 and "wikitext-103-v1.zip (wiki.*.tokens)" in stderr_last_line(proc)


def test_an_empty_evaluation_split_stops_with_one_line(tmp_path):
    """An empty valid.txt (a cut extraction) prepared silently, and evaluation failed later."""
    corpus = _corpus(tmp_path / "c", " a b\n", "", " a\n")
    proc = run_cli([sys.executable, PREPARE, str(corpus), str(tmp_path / "out")])
    assert proc.returncode == 1 and stderr_last_line(proc) == (
        f"prepare_dataset.py: error: {corpus / 'valid.txt'} is empty (an extraction cut short?):"
        " evaluation reads the valid split; unpack the corpus again")
    assert not (tmp_path / "out").exists()
