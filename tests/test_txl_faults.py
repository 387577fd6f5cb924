"""Transformer-XL under faults, through main.py's code path and prepare_dataset.py: evaluation
inputs checked before step 1, one line naming the file and byte or field for bad text and token
files, a preparation that fails leaves the previous one intact, flags checked against the
vocabulary, and predict that skips an unreadable prompt file."""
import json
import os
import sys

import numpy as np
import pytest
from conftest import OWN_HANDLING, ROOT, run_cli, stderr_last_line
from conftest import TINY as PRESET_TINY
from reliability_helpers import damaged_copy, digests, main_in_process, tmpfs, trained_steps

from txl.task import TransformerXLTask

PREPARE = os.path.join(ROOT, "transformerxl", "prepare_dataset.py")
TINY = [*PRESET_TINY, "--seed", "3", "--lr_warmup_steps", "2", "--display_every", "1",
        "--iter_unit", "batch"]


# The corpus preparation is this repository's Python (no TensorFlow in it): in one suite.
PREPARE_ONLY = pytest.mark.one_stack(
    "pip", "the corpus preparation is this repository's Python and numpy's file writing; the "
    "data it writes is read on both stacks")


def _main(capsys, *args) -> tuple[int, str]:
    return main_in_process(TransformerXLTask, capsys, [*TINY, *args])


@OWN_HANDLING
@pytest.mark.parametrize("fault, message", [
    ("missing", "valid.npy is missing: prepare the corpus with transformerxl/prepare_dataset.py"),
    ("short", "the valid split (6 tokens) is too short for one segment of --eval_tgt_len 64 "
              "in each of --eval_batch_size 4 streams"),
    ("negative", "valid.npy: token id -5 at position 7 is negative"),
    ("not numpy", "valid.npy is not a NumPy array"),
])
def test_bad_evaluation_tokens_stop_before_step_1(corpus, tmp_path, capsys, fault, message):
    data = damaged_copy(corpus, tmp_path)
    valid = data / "valid.npy"
    if fault == "missing":
        valid.unlink()
    elif fault == "short":
        np.save(valid, np.load(valid)[:6])
    elif fault == "negative":
        ids = np.load(valid)
        ids[7] = -5
        np.save(valid, ids)
    else:
        valid.write_bytes(b"\x93NUMPY garbage")
    out = tmp_path / "r"
    code, last = _main(capsys, "--mode", "train_and_evaluate", "--num_iter", "3", "--data_dir",
                       str(data), "--results_dir", str(out), "--eval_batch_size", "4",
                       "--eval_tgt_len", "64")
    assert code == 1 and message in last and last.startswith("main.py: error: "), last
    assert trained_steps(out) == 0 and not list((out / "checkpoints").glob("ckpt-*"))


@OWN_HANDLING
def test_a_byte_that_is_not_utf8_in_vocab_txt_is_named_with_its_offset(corpus, tmp_path, capsys):
    data = damaged_copy(corpus, tmp_path)
    vocab = (data / "vocab.txt").read_bytes()
    at = vocab.index(b"\n", 10) + 1  # the first byte of a later line
    (data / "vocab.txt").write_bytes(vocab[:at] + b"\xff" + vocab[at + 1:])
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"))
    assert code == 1 and last == (f"main.py: error: {data / 'vocab.txt'}: byte {at} is not "
                                  "UTF-8 text (invalid start byte: ff)"), last


def _corpus(root, lines=40):
    root.mkdir()
    for split in ("train", "valid", "test"):
        (root / f"{split}.txt").write_text("".join(f" the {split} line {i} of words .\n"
                                                   for i in range(lines)))
    return root


@PREPARE_ONLY
def test_prepare_names_the_corpus_file_and_byte_offset_of_bad_utf8(tmp_path):
    root = _corpus(tmp_path / "corpus")
    text = (root / "valid.txt").read_bytes()
    at = len(text) // 2
    (root / "valid.txt").write_bytes(text[:at] + b"\xc3\x28" + text[at + 2:])
    proc = run_cli([sys.executable, PREPARE, str(root), str(tmp_path / "out")])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert stderr_last_line(proc) == (f"prepare_dataset.py: error: {root / 'valid.txt'}: byte "
                                      f"{at} is not UTF-8 text (invalid continuation byte: c3)")


@PREPARE_ONLY
def test_a_failed_preparation_leaves_the_previous_one_intact(tmp_path):
    """A disk that fills while the streams are written: no new vocab.txt beside a truncated
    train.npy, the previous preparation byte for byte."""
    small, big = _corpus(tmp_path / "small"), _corpus(tmp_path / "big", lines=30_000)
    with tmpfs(tmp_path / "disk", 1024) as disk:
        out = os.path.join(disk, "out")
        proc = run_cli([sys.executable, PREPARE, str(small), out])
        assert proc.returncode == 0, proc.stderr
        before = digests(out)
        proc = run_cli([sys.executable, PREPARE, str(big), out])
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        last = stderr_last_line(proc)
        assert last.startswith(f"prepare_dataset.py: error: cannot write the preparation to "
                               f"{out} (") and last.endswith("); the previous preparation there "
                                                             "is unchanged"), last
        assert digests(out) == before


@OWN_HANDLING
@pytest.mark.parametrize("extra, message", [
    (["--cutoffs", "20,10"], "--cutoffs 20,10: the cutoffs must increase strictly"),
    (["--cutoffs", "0,10"], "--cutoffs 0,10: every cutoff must be positive"),
    (["--cutoffs", "10,20,5000"], "--cutoffs 10,20,5000: the last cutoff must be below the "
                                  "vocabulary size ("),
    (["--mode", "predict", "--to_predict", "x", "--top_k", "100000"],
     "--top_k 100000 exceeds the vocabulary ("),
])
def test_flags_checked_against_the_vocabulary(corpus, tmp_path, capsys, extra, message):
    code, last = _main(capsys, "--data_dir", corpus, "--results_dir", str(tmp_path), *extra)
    assert code == 2 and last.startswith(f"main.py: error: {message}"), last


@OWN_HANDLING
def test_predict_skips_an_unreadable_prompt_file_and_goes_on(corpus, tmp_path, capsys):
    out = tmp_path / "r"
    code, _ = _main(capsys, "--mode", "train", "--num_iter", "1", "--data_dir", corpus,
                    "--results_dir", str(out))
    assert code == 0
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "a.txt").write_text("the king sees\n")
    (prompts / "b.txt").write_bytes(b"the \xff queen\n")
    (prompts / "c.txt").write_text("a fool loves\n")
    code, _ = _main(capsys, "--mode", "predict", "--to_predict", str(prompts), "--gen_len", "3",
                    "--data_dir", corpus, "--results_dir", str(out))
    assert code == 0
    records = json.loads((out / "predictions.json").read_text())
    assert [os.path.basename(r["file"]) for r in records] == ["a.txt", "b.txt", "c.txt"]
    assert len(records[0]["token_ids"]) == 3 and len(records[2]["token_ids"]) == 3
    assert records[1]["error"] == f"{prompts / 'b.txt'}: byte 4 is not UTF-8 text (invalid " \
                                  "start byte: ff)"


@OWN_HANDLING
def test_a_vocabulary_changed_after_preparation_is_refused(corpus, tmp_path, capsys):
    """vocab.txt is checked against the corpus-info.json written with the token ids: one word
    added to it would shift no id but silently mean another vocabulary."""
    data = damaged_copy(corpus, tmp_path)
    with open(data / "vocab.txt", "a") as f:
        f.write("zebra\n")
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"))
    info = json.loads((data / "corpus-info.json").read_text())
    assert code == 1 and last == (
        f"main.py: error: {data}/vocab.txt has {info['vocab_size'] + 1:,} words but "
        f"{data}/corpus-info.json says the corpus was prepared with {info['vocab_size']:,}: the "
        "vocabulary was changed after preparation; prepare the corpus again")


@OWN_HANDLING
def test_a_vocabulary_with_two_words_swapped_is_refused(corpus, tmp_path, capsys):
    """The same count, other words at two ids: the hash in corpus-info.json tells."""
    data = damaged_copy(corpus, tmp_path)
    words = (data / "vocab.txt").read_text(encoding="utf-8").splitlines()
    words[1], words[2] = words[2], words[1]
    (data / "vocab.txt").write_text("".join(w + "\n" for w in words), encoding="utf-8")
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"))
    assert code == 1 and last == (
        f"main.py: error: {data}/vocab.txt is not the vocabulary {data}/corpus-info.json was "
        "prepared with (its words were reordered or replaced: vocab_sha256 differs); prepare "
        "the corpus again")


@OWN_HANDLING
def test_a_prompt_of_unknown_words_only_is_said(tmp_path, capsys):
    """A corpus whose validation text has a word train lacks has <unk>; a prompt of unknown
    words only generates from no context, and says so."""
    raw = tmp_path / "raw"
    raw.mkdir()
    line = " the king sees the night . a fool loves the sea . \n"
    (raw / "train.txt").write_text(line * 300)
    (raw / "valid.txt").write_text(line * 20 + " a ghost . \n")  # "ghost": not in train
    (raw / "test.txt").write_text(line * 20)
    proc = run_cli([sys.executable, PREPARE, str(raw), str(tmp_path / "data")])
    assert proc.returncode == 0, proc.stderr
    assert "<unk>" in (tmp_path / "data" / "vocab.txt").read_text().split()
    out = tmp_path / "r"
    code, _ = _main(capsys, "--mode", "train", "--num_iter", "1",
                    "--data_dir", str(tmp_path / "data"), "--results_dir", str(out))
    assert code == 0
    prompts = tmp_path / "p.txt"
    prompts.write_text("xylophone quasar\nthe king\n")
    from common import runner
    code = runner.main(TransformerXLTask, ["main.py", *TINY, "--mode", "predict", "--to_predict",
                                           str(prompts), "--gen_len", "2", "--data_dir",
                                           str(tmp_path / "data"), "--results_dir", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert ("note: p.txt, prompt 1: no word of it is in the vocabulary (all <unk>): the "
            "continuation has no context from it") in printed
    assert "prompt 2: no word" not in printed
