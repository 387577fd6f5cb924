"""Transformer-XL through main.py's code path: every mode on a tiny configuration, the DALI and
tf.data pipelines training identically, --batch_chunk with memory equal to a larger batch,
resuming at the exact step, the exported SavedModel, and one-line errors."""
import itertools
import json
import os
import sys

import dle_logs
import numpy as np
import pytest
import tensorflow as tf
from conftest import OWN_HANDLING, ROOT, run_cli, stderr_last_line, step_losses
from conftest import TINY as PRESET_TINY

from common import runner
from common.runtime.dllogger import last_summary, read_records
from txl.task import TransformerXLTask

MAIN = os.path.join(ROOT, "transformerxl", "main.py")
TINY = [*PRESET_TINY, "--seed", "3", "--lr_warmup_steps", "2", "--display_every", "1"]


def _run(args, data, out):
    return runner.run(TransformerXLTask, ["main.py", *TINY, "--data_dir", data,
                                          "--results_dir", str(out), *args])


def _state(model_dir):
    """Every tensor of the newest checkpoint: weights, optimizer moments, step."""
    reader = tf.train.load_checkpoint(model_dir)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k not in ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/.ATTRIBUTES/VARIABLE_VALUE")}


def _losses(results_dir):
    records = read_records(os.path.join(results_dir, "log.json"))
    return step_losses(records)


@pytest.mark.both_stacks
def test_every_mode_on_a_tiny_configuration(tmp_path, corpus):
    s = _run(["--mode", "train_and_evaluate", "--iter_unit", "batch", "--num_iter", "12",
              "--eval_every", "6"], corpus, tmp_path)
    assert s["final_step"] == 12 and np.isfinite(s["final_loss"])
    # The log holds vocab.txt's size, not the --vocab_size default (WikiText-103's).
    words = len((open(os.path.join(corpus, "vocab.txt")).read()).split("\n")) - 1
    params = [r["data"] for r in read_records(os.path.join(tmp_path, "log.json"))
              if r.get("step") == "PARAMETER"]
    assert params[0]["vocab_size"] == words < 267_735
    # NVIDIA's protocol: 4 streams of the valid split in segments of 8 (the last shorter).
    valid = np.load(os.path.join(corpus, "valid.npy"))
    assert s["eval_tokens"] == (len(valid) // 4 - 1) * 4
    assert 1 < s["eval_ppl"] < 200 and 1 < s["eval_ppl_token_weighted"] < 200

    ev = _run(["--mode", "evaluate", "--eval_split", "valid"], corpus, tmp_path)
    assert ev["eval_ppl"] == pytest.approx(s["eval_ppl"], rel=1e-5)
    test = _run(["--mode", "evaluate"], corpus, tmp_path)  # evaluate defaults to the test split
    assert test["eval_tokens"] == (len(np.load(os.path.join(corpus, "test.npy"))) // 4 - 1) * 4

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the king sees\nmy lord follows the\n")
    for extra in ([], ["--sample", "--temperature", "0.8", "--top_k", "5"]):
        p = _run(["--mode", "predict", "--to_predict", str(prompts), "--gen_len", "6", *extra],
                 corpus, tmp_path)
        assert p["predictions"] == 2
        with open(tmp_path / "predictions.json") as f:
            preds = json.load(f)
        assert [r["prompt"] for r in preds] == ["the king sees", "my lord follows the"]
        assert all(len(r["continuation"].split()) == 6 == len(r["token_ids"]) for r in preds)

    for mode in ("training_benchmark", "inference_benchmark"):
        b = _run(["--mode", mode, "--iter_unit", "batch", "--num_iter", "4",
                  "--warmup_steps", "1"], corpus, tmp_path / mode)
        assert b["timed_steps"] == 3
        if mode == "inference_benchmark":  # NVIDIA's evaluation figures
            assert b["eval_avg_throughput"] > 0 and b["eval_50%_latency"] <= b["eval_99%_latency"]
        else:
            assert b["train_throughput"] > 0
        # What a parser written for NVIDIA's logs finds in each run (tests/dle_logs.py).
        assert dle_logs.check_log("transformerxl", tmp_path / mode / "log.json") == [mode]
    assert dle_logs.check_log("transformerxl", tmp_path / "log.json") == [
        "train_and_evaluate", "evaluate", "evaluate", "predict", "predict"]


# `make test-slow` (the suite's time budget): AMP's inference is the reference outputs' and the XLA
# tests'.
@pytest.mark.slow
def test_inference_under_amp_runs_on_bfloat16_weights_with_the_mixed_models_results(
        tmp_path, corpus, monkeypatch):
    """evaluate, predict and inference_benchmark run a bfloat16 copy of the model (the task's
    ``infers_in_compute_dtype``) and give what the mixed model with float32 weights gives."""
    _run(["--mode", "train", "--iter_unit", "batch", "--num_iter", "3"], corpus, tmp_path)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the king sees\n")
    modes = {"evaluate": [], "predict": ["--to_predict", str(prompts), "--gen_len", "5"],
             "inference_benchmark": ["--iter_unit", "batch", "--num_iter", "2",
                                     "--warmup_steps", "1"]}

    def runs():
        out = {m: _run(["--mode", m, "--amp", *extra], corpus, tmp_path)
               for m, extra in modes.items()}
        with open(tmp_path / "predictions.json") as f:
            return out, json.load(f)[0]["token_ids"]

    copy, copy_words = runs()
    monkeypatch.setattr(TransformerXLTask, "infers_in_compute_dtype", False)
    mixed, mixed_words = runs()
    assert {s["inference_weights"] for s in copy.values()} == {"bfloat16"}
    assert {s["inference_weights"] for s in mixed.values()} == {"float32"}
    assert copy["evaluate"]["eval_ppl"] == mixed["evaluate"]["eval_ppl"]
    assert copy_words == mixed_words
    train = _run(["--mode", "training_benchmark", "--amp", "--num_iter", "1", "--warmup_steps",
                  "0", "--iter_unit", "batch"], corpus, tmp_path / "tb")
    assert "inference_weights" not in train


@pytest.mark.both_stacks
def test_export_scores_and_continues_like_the_model(tmp_path, corpus):
    _run(["--mode", "train", "--iter_unit", "batch", "--num_iter", "3"], corpus, tmp_path)
    export = tmp_path / "export"
    evaluated = _run(["--mode", "evaluate", "--export_dir", str(export)], corpus, tmp_path)
    # The model card names the split evaluate read (the test split, its default), and a later
    # run's export of the same checkpoint (predict, as the README's steps go) carries it.
    card = json.loads((export / "model_card.json").read_text())
    assert (card["scored"]["split"], card["scored"]["step"]) == ("test", 3), card["scored"]
    assert card["scored"]["metrics"]["eval_ppl"] == pytest.approx(evaluated["eval_ppl"])
    # The corpus read, not WikiText-103 (its 267,735 words would make it so).
    info = json.loads(open(os.path.join(corpus, "corpus-info.json")).read())
    assert card["data"] == (f"a text corpus of {info['vocab_size']:,} words "
                            f"({info['tokens']['train']:,} training tokens)")
    assert "datasets" not in card
    from huggingface_hub import ModelCard
    (result,) = ModelCard.load(export / "README.md").data.eval_results  # the perplexity
    assert (result.dataset_name, result.dataset_type, result.dataset_split, result.metric_type,
            result.metric_value) == (card["data"], "custom", "test", "perplexity",
                                     pytest.approx(evaluated["eval_ppl"]))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the king sees\n")
    _run(["--mode", "predict", "--to_predict", str(prompts), "--gen_len", "1", "--export_dir",
          str(tmp_path / "later")], corpus, tmp_path)
    assert json.loads((tmp_path / "later" / "model_card.json").read_text())["scored"] == \
        card["scored"]
    loaded = tf.saved_model.load(str(export))
    trainer = runner.setup(TransformerXLTask, ["main.py", *TINY, "--data_dir", corpus,
                                                "--results_dir", str(tmp_path), "--mode",
                                                "evaluate"])
    trainer.restore(required=True)
    model = trainer.model
    tokens = tf.constant(np.load(os.path.join(corpus, "test.npy"))[:20].reshape(2, 10))
    empty = tf.zeros((2, 2, 0, 32))
    # The export serves with the evaluation's memory (NVIDIA's protocol: --eval_mem_len 16,
    # --eval_clamp_len 12 and --eval_same_length at the tiny preset), as evaluation scores.
    f = trainer.flags
    memory = {"mem_len": f.eval_mem_len, "clamp_len": f.eval_clamp_len,
              "same_length": f.eval_same_length}
    served = loaded.signatures["serving_default"](tokens=tokens, mems=empty)
    logp, mems = model.log_prob(tokens, model.empty_mems(2), **memory)
    np.testing.assert_allclose(served["log_probs"].numpy(), logp[:, -1].numpy(), atol=1e-5)
    again = loaded.signatures["serving_default"](tokens=tokens, mems=served["new_mems"])
    assert again["new_mems"].shape == (2, 2, 16, 32)  # memory kept to --eval_mem_len
    start = tf.stack(model.initial_mems(2, f.eval_mem_len))  # evaluation's first memory
    scored = loaded.signatures["score"](tokens=tokens[:, :-1], targets=tokens[:, 1:],
                                        mems=start)
    nll, _ = model(tokens[:, :-1], tf.unstack(start), tokens[:, 1:], training=False,
                   **memory)
    np.testing.assert_allclose(scored["nll"].numpy(), nll.numpy(), rtol=1e-5)
    info = json.loads((export / "assets" / "client.json").read_text())
    assert {k: info[k] for k in ("memory", *memory)} == {"memory": "evaluation", **memory}
    assert info["max_segment"] == f.tgt_len + f.eval_mem_len
    assert (export / "assets" / "vocab.txt").read_text().split("\n")[0] == "<eos>"


def test_dali_trains_exactly_as_tfdata(tmp_path, corpus):
    args = ["--mode", "train", "--iter_unit", "batch", "--num_iter", "5"]
    _run(args, corpus, tmp_path / "tfdata")
    _run(args + ["--dali"], corpus, tmp_path / "dali")
    np.testing.assert_allclose(_losses(tmp_path / "dali"), _losses(tmp_path / "tfdata"),
                               rtol=1e-6)


# `make test-slow` (the suite's time budget): the accumulation's arithmetic is test_accumulation's,
# on both stacks.
@pytest.mark.slow
def test_batch_chunk_with_memory_equals_one_batch_k_times_larger(tmp_path, corpus):
    """Two micro-batches of 4 rows, each carrying its own memory, against one batch of 8 rows,
    over 6 steps: the same losses and the same weights."""
    base = ["--mode", "train", "--iter_unit", "batch", "--num_iter", "6"]
    _run(base + ["--batch_size", "8"], corpus, tmp_path / "one")
    _run(base + ["--batch_size", "4", "--batch_chunk", "2"], corpus, tmp_path / "chunked")
    np.testing.assert_allclose(_losses(tmp_path / "chunked"), _losses(tmp_path / "one"),
                               rtol=1e-5)
    one, chunked = (_state(str(tmp_path / d / "checkpoints")) for d in ("one", "chunked"))
    assert one.keys() == chunked.keys() and len(one) > 50
    # Weights: LAMB divides each moment by the root of the second one, so a weight whose
    # gradient is tiny moves by lr x (rounding noise / itself): summing two micro-batches or
    # one batch of rows rounds differently. TensorFlow 2.17 (NGC's) puts 4 of 2,048 elements of
    # one kernel 5.8e-6 apart after 6 steps; a wrong accumulation moves them by about lr (1e-2).
    for k in one:
        np.testing.assert_allclose(chunked[k], one[k], rtol=1e-4, atol=2e-5, err_msg=k)


def _stop_after(monkeypatch, steps):
    """The run stops after ``steps`` steps, as SIGTERM would make it (checkpoint, exit 0)."""
    from common.runtime.graceful_stop import GracefulStop
    calls = itertools.count(1)
    monkeypatch.setattr(GracefulStop, "should_stop", lambda self, dist: next(calls) >= steps)


@OWN_HANDLING
# `make test-slow` (the suite's time budget): a resume at the exact step is test_runtime's with
# ResNet-50 (common/'s loop).
@pytest.mark.slow
def test_resume_continues_at_the_exact_step(tmp_path, corpus, monkeypatch):
    """Two epochs in one run equal one epoch, a stop, and a resumed second epoch: weights,
    optimizer and data position all continue (memory restarts at every epoch in both). A
    resume within an epoch continues at the exact step and data position, with fresh memory."""
    short = ["--tgt_len", "48", "--batch_size", "8"]  # epochs of a few steps
    spe = _run(short + ["--mode", "train", "--iter_unit", "batch", "--num_iter", "1"], corpus,
               tmp_path / "probe")
    epoch = int(round(1 / spe["epochs"]))
    assert 3 <= epoch <= 30
    args = short + ["--mode", "train", "--iter_unit", "epoch", "--num_iter", "2"]
    _run(args, corpus, tmp_path / "straight")
    with monkeypatch.context() as m:
        _stop_after(m, epoch)
        s = _run(args, corpus, tmp_path / "resumed")
    assert s["final_step"] == epoch and s["stopped_by_signal"]
    s = _run(args, corpus, tmp_path / "resumed")
    assert s["start_step"] == epoch and s["final_step"] == 2 * epoch
    straight, resumed = (_state(str(tmp_path / d / "checkpoints"))
                         for d in ("straight", "resumed"))
    for k in straight:
        np.testing.assert_allclose(resumed[k], straight[k], rtol=1e-5, atol=1e-7, err_msg=k)
    np.testing.assert_allclose(_losses(tmp_path / "resumed"), _losses(tmp_path / "straight"),
                               rtol=1e-5)

    with monkeypatch.context() as m:  # within an epoch: the same step and data, fresh memory
        _stop_after(m, 2)
        _run(args, corpus, tmp_path / "mid")
    s = _run(args, corpus, tmp_path / "mid")
    assert s["start_step"] == 2 and s["final_step"] == 2 * epoch
    mid = _losses(tmp_path / "mid")
    straight_losses = _losses(tmp_path / "straight")
    assert len(mid) == len(straight_losses)
    np.testing.assert_allclose(mid[:2], straight_losses[:2], rtol=1e-6)


@OWN_HANDLING
@pytest.mark.parametrize("extra,message", [
    (["--div_val", "4"], "--div_val: only 1 is implemented"),
    (["--mode", "predict", "--to_predict", "x"], "--mode predict needs a vocabulary: "
     "--data_dir (its vocab.txt maps words), or a --model_dir whose checkpoint keeps one"),
    (["--mode", "inference_benchmark", "--eval_batch_size", "3", "--iter_unit", "batch",
      "--num_iter", "3", "--warmup_steps", "1"], None),
    (["--lr", "0"], "--lr must be greater than 0"),
])
def test_bad_flags_stop_with_one_line(tmp_path, extra, message):
    proc = run_cli([sys.executable, MAIN, *TINY, "--vocab_size", "100", "--results_dir",
                    str(tmp_path), *extra])
    if message is None:  # an odd evaluation batch on one process is fine
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stderr
    assert message in stderr_last_line(proc)


@OWN_HANDLING
def test_corrupt_token_file_is_named(tmp_path, corpus):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("vocab.txt", "valid.npy", "test.npy", "corpus-info.json"):
        (bad / name).write_bytes(open(os.path.join(corpus, name), "rb").read())
    np.save(bad / "train.npy", np.array([1, 2, 10 ** 6], np.int32))
    proc = run_cli([sys.executable, MAIN, *TINY, "--data_dir", str(bad), "--results_dir",
                    str(tmp_path / "out"), "--mode", "train"])
    assert proc.returncode == 1
    assert "train.npy: token id 1000000 at position 2 is outside the" in stderr_last_line(proc)


# Two ranks' training and evaluation: SSD320's two-process evaluation and ResNet-50's sbatch job
# in the suite; Transformer-XL's: `make test-slow` (the suite's time budget).
@pytest.mark.slow
def test_two_processes_train_and_evaluate_as_one(tmp_path, corpus):
    """mpirun -np 2 with 2 rows each equals one process with 4 rows: each rank owns its block
    of streams and carries its memory, gradients are averaged, and the perplexity metrics add
    up over ranks (eval: 4 streams, 2 per rank)."""
    args = ["--mode", "train_and_evaluate", "--iter_unit", "batch", "--num_iter", "4"]
    one = _run(args, corpus, tmp_path / "one")
    proc = run_cli(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                    sys.executable, MAIN, *TINY, "--batch_size", "2", "--data_dir", corpus,
                    "--results_dir", str(tmp_path / "two"), *args], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = last_summary(read_records(str(tmp_path / "two" / "log.json")))
    assert two["world_size"] == 2 and two["eval_tokens"] == one["eval_tokens"]
    # The logged loss is rank 0's own rows; the perplexity after 4 steps compares the weights.
    assert two["eval_ppl"] == pytest.approx(one["eval_ppl"], rel=1e-5)
    assert two["eval_ppl_token_weighted"] == pytest.approx(one["eval_ppl_token_weighted"],
                                                           rel=1e-5)


def test_export_memory_chooses_the_served_memory_lengths():
    from types import SimpleNamespace

    from txl.exports import served_memory
    f = SimpleNamespace(mem_len=192, clamp_len=-1, same_length=False, eval_mem_len=640,
                        eval_clamp_len=400, eval_same_length=True, export_memory="eval")
    assert served_memory(f) == {"mem_len": 640, "clamp_len": 400, "same_length": True}
    f.export_memory = "train"
    assert served_memory(f) == {"mem_len": 192, "clamp_len": -1, "same_length": False}
