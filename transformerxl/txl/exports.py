"""Transformer-XL's export: next-word log-probabilities and scoring, both with memory.

Two signatures over (B, Q) int32 ``tokens`` (ids of ``assets/vocab.txt``'s lines) and the
memory ``mems`` (n_layer, B, M, d_model) float32 (zeros of any M to start; M grows up to the
served memory length): ``serving_default`` -> the next word's log-probabilities ``log_probs``
(B, vocab) and the new memory ``new_mems`` (an output named as an input would clash in ONNX);
``score`` (also given ``targets``) -> the NLL ``nll`` (B, Q) and the new memory. The memory is
float32 at the signatures under every policy (the model keeps it in its compute dtype).

The memory an export keeps and reads is the evaluation protocol's by default
(``--export_memory eval``: --eval_mem_len, --eval_clamp_len, --eval_same_length; NVIDIA's 640,
400 and True at base), so that a served text is scored as evaluation scores it; ``train`` keeps
the training's. ``client.json`` records which (``memory``) and its lengths.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import tensorflow as tf

from common import graph
from common.errors import DataError
from common.export.module import Exports, ExportSpec
from common.models import MODELS
from txl.generate import generate
from txl.prepare import utf8_lines

# WikiText-103's vocabulary with <eos> (NVIDIA's corpus-info.json, the base model's embedding).
WIKITEXT_103_WORDS = 267735


def segment_bytes(cfg) -> dict:
    """The peak bytes one row of a segment of ``q`` tokens over ``m`` positions of memory
    takes while the model runs it, as ``score_pair * q * (q + m) + token * q``: a layer's
    attention keeps about four float32 tensors of heads x q x (q + m) scores alive at once
    (the content and position terms, their sum masked, its softmax), and each token about
    three rows of the softmax head's logits (its words and clusters: the logits, their
    exponentials, the log-softmax) with the feed-forward's inner and the layer's
    activations. The layers run one after the other, so one layer's share counts."""
    head = min([c for c in cfg.cutoffs if c < cfg.vocab_size] or [cfg.vocab_size])
    clusters = len([c for c in cfg.cutoffs if c < cfg.vocab_size])
    return {"score_pair": 4 * 4 * cfg.n_head,
            "token": 4 * (3 * (head + clusters) + 2 * cfg.d_inner + 8 * cfg.d_model)}


class TXLExports(Exports):
    # Triton keeps the memory per sequence; 16 sequences run together. On the Python backend
    # (cpu/) the model keeps the SavedModel's growing memory (``mems``); on the GPU backends
    # (triton/: ONNX Runtime, TensorRT) the server keeps ``step``'s fixed-length memory and
    # its length as implicit state. ``targets`` may be left out of ``model.onnx`` (generation).
    # ``model.onnx`` only with --export_onnx: tf2onnx takes more than 18 GiB converting the
    # base model (it was killed at 17.9 GiB on a 24 GiB machine; docs/tools.md), which a
    # --export_triton for the CPU host should not need; without it triton/ holds cpu/'s model.
    export = ExportSpec(triton_name="transformerxl", triton_state=("mems", "new_mems", 1),
                        triton_max_batch_size=16,
                        onnx_files={"model.onnx": "step"},
                        implicit_state={"memory": "new_memory",
                                        "memory_length": "new_memory_length"},
                        onnx_defaults={"targets": (1, 1)})
    inference_input = None  # the whole batch: tokens and targets
    inference_streams = True  # the memory runs from batch to batch

    def signatures(self, model):
        cfg, served = self.task.cfg, served_memory(self.flags)
        tokens = tf.TensorSpec([None, None], tf.int32, name="tokens")
        targets = tf.TensorSpec([None, None], tf.int32, name="targets")
        mems = tf.TensorSpec([cfg.n_layer, None, None, cfg.d_model], tf.float32, name="mems")

        @graph.function(input_signature=[tokens, mems])
        def next_word(tokens, mems):
            with tf.control_dependencies(_ids_checked(tokens=tokens, vocab=cfg.vocab_size)):
                logp, new = model.next_log_prob(tokens, tf.unstack(mems, cfg.n_layer),
                                                **served)
            return {"log_probs": logp, "new_mems": tf.cast(tf.stack(new), tf.float32)}

        @graph.function(input_signature=[tokens, targets, mems])
        def score(tokens, targets, mems):
            with tf.control_dependencies(_ids_checked(tokens=tokens, targets=targets,
                                                      vocab=cfg.vocab_size)):
                nll, new = model(tokens, tf.unstack(mems, cfg.n_layer), targets,
                                 training=False, **served)
            return {"nll": nll, "new_mems": tf.cast(tf.stack(new), tf.float32)}

        fixed = tf.TensorSpec([None, cfg.n_layer, served["mem_len"], cfg.d_model], tf.float32,
                              name="memory")
        length = tf.TensorSpec([None, 1], tf.int32, name="memory_length")

        @graph.function(input_signature=[tokens, targets, fixed, length])
        def step(tokens, targets, memory, memory_length):
            """Both answers over a memory of one length (``TransformerXL.fixed_step``): what
            a server keeps per sequence as a tensor of one shape. ``targets`` broadcast to the
            tokens' shape (the ONNX file's default, one zero, when generating)."""
            targets = tf.broadcast_to(targets, tf.shape(tokens))
            mem_len = served["mem_len"]
            checks = [*_ids_checked(tokens=tokens, targets=targets, vocab=cfg.vocab_size),
                      tf.debugging.assert_greater_equal(
                          memory_length, 0, message="memory_length: must be in "
                                                    f"[0, {mem_len}] (mem_len)"),
                      tf.debugging.assert_less_equal(
                          memory_length, mem_len, message="memory_length: must be in "
                                                          f"[0, {mem_len}] (mem_len)")]
            with tf.control_dependencies(checks):
                # Bounded in the graph too: its ONNX file keeps no assertion, and a length
                # past the memory let queries see more than same_length allows.
                lengths = tf.clip_by_value(memory_length[:, 0], 0, mem_len)
                nll, logp, new, lengths = model.fixed_step(
                    tokens, targets, tf.unstack(memory, cfg.n_layer, axis=1), lengths,
                    clamp_len=served["clamp_len"], same_length=served["same_length"])
            return {"log_probs": logp, "nll": nll,
                    "new_memory": tf.cast(tf.stack(new, axis=1), tf.float32),
                    "new_memory_length": lengths[:, None]}
        return {"serving_default": next_word, "score": score, "step": step}

    def assets(self):
        out = {"config.json": json.dumps(dataclasses.asdict(self.task.cfg), indent=1) + "\n"}
        if self.task.vocab:
            out["vocab.txt"] = "".join(w + "\n" for w in self.task.vocab)
        return out

    def client_info(self):
        cfg, f = self.task.cfg, self.flags
        vocab = self.assets().get("vocab.txt")
        memory = served_memory(f)
        # The longest segment a request may carry (the served sequence model refuses longer
        # ones): --tgt_len new tokens over the served memory. Each layer's attention holds
        # heads x segment x (segment + memory) scores, so a request of thousands of tokens
        # would take the serving process's memory; a longer text goes in several segments
        # of one sequence.
        max_segment = f.tgt_len + memory["mem_len"]
        return {"vocab": "vocab.txt" if vocab else None, "config": "config.json",
                "vocab_size": cfg.vocab_size,
                "vocab_sha256": hashlib.sha256(vocab.encode()).hexdigest() if vocab else None,
                "n_layer": cfg.n_layer, "d_model": cfg.d_model,
                "memory": {"eval": "evaluation", "train": "training"}[f.export_memory],
                **memory, "max_segment": max_segment,
                # The segment evaluation reads (common.api's score follows its protocol).
                "eval_tgt_len": f.eval_tgt_len,
                # What the server keeps of each open sequence (float32 memory).
                "state_bytes": cfg.n_layer * memory["mem_len"] * cfg.d_model * 4,
                # What one request of a segment takes while it runs (the served sequence model
                # runs rows together up to a bound on their sum): ``segment_bytes``.
                "row_bytes": segment_bytes(cfg),
                "data": _data_read(f.data_dir, self.task.name),
                "start_memory": f"zeros of shape ({cfg.n_layer}, batch, 0, {cfg.d_model})"}

    def serving_call(self, inputs, state):
        """``score`` at the evaluation's memory length (the steady state: the memory keeps
        --eval_mem_len positions; TF-TRT needs fixed shapes per engine)."""
        tokens, targets = inputs
        mems = tf.cast(tf.stack(state), tf.float32)  # the signature's dtype
        return "score", {"tokens": tokens, "targets": targets, "mems": mems}

    def engine_shapes(self):
        """``model.onnx``'s (``step``'s) segments in a TensorRT profile: one token up to
        --tgt_len tokens (the memory: its one served length)."""
        q = self.flags.tgt_len
        return {"tokens": ([1], [q]), "targets": ([1], [q])}

    # --- what inference is --------------------------------------------------------------
    def infer(self, model, inputs, state=None):
        return self.task.forward_segment(model, inputs, state)

    def predict_file(self, model, path):
        """One record per prompt (a line of the file), continued by --gen_len words."""
        f = self.flags
        prompts = [line.strip() for line in utf8_lines(path) if line.strip()]
        if not prompts:
            raise DataError(f"{path} has no prompt (one prompt a line)")
        records = []
        unk = self.task.word_index.get("<unk>")
        for n, prompt in enumerate(prompts, 1):
            if unk is not None and all(i == unk for i in self.task.encode(prompt)):
                self.task.ctx.logger.print(
                    f"note: {os.path.basename(path)}, prompt {n}: no word of it is in the "
                    "vocabulary (all <unk>): the continuation has no context from it")
            ids = generate(model, self.task.encode(prompt), f.gen_len, greedy=not f.sample,
                           temperature=f.temperature, top_k=f.top_k, seed=f.seed,
                           progress=lambda done, total, rate, n=n: self.task.ctx.logger.print(
                               f"{os.path.basename(path)}, prompt {n}/{len(prompts)}: "
                               f"{done}/{total} words ({rate:.1f}/s)"))
            records.append(({"file": path, "prompt": prompt,
                             "continuation": " ".join(self.task.vocab[i] for i in ids),
                             "token_ids": ids, "sampled": f.sample}, None))
        return records


def _ids_checked(vocab: int, **ids) -> list:
    """Assertions that every id is in ``[0, vocab)``: out of range, an embedding lookup fails
    with an index error and XLA's gather of a target clamps it (an NLL of another word)."""
    return [check(v, bound, message=f"{name}: ids must be in [0, {vocab})")
            for name, v in ids.items()
            for check, bound in ((tf.debugging.assert_greater_equal, 0),
                                 (tf.debugging.assert_less, vocab))]


def served_memory(f) -> dict:
    """The memory lengths an export serves with (``--export_memory``): ``mem_len``,
    ``clamp_len`` and ``same_length``, as ``TransformerXL.hidden`` takes them."""
    if f.export_memory == "train":
        return {"mem_len": f.mem_len, "clamp_len": f.clamp_len, "same_length": f.same_length}
    return {"mem_len": f.eval_mem_len, "clamp_len": f.eval_clamp_len,
            "same_length": f.eval_same_length}


def _data_read(data_dir, model):
    """WikiText-103 when the corpus' ``corpus-info.json`` (prepare_dataset.py's) counts its
    267,735 words; else the corpus' size."""
    path = os.path.join(data_dir or "", "corpus-info.json")
    if not data_dir or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        info = json.load(f)
    if info.get("vocab_size") == WIKITEXT_103_WORDS:
        return {"dataset": MODELS[model].dataset, "description": "WikiText-103"}
    train = info.get("tokens", {}).get("train")
    return {"dataset": None, "description": f"a text corpus of {info.get('vocab_size'):,} "
            f"words" + (f" ({train:,} training tokens)" if train else "")}
