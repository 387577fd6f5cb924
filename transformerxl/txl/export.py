"""Transformer-XL as a SavedModel: next-word log-probabilities and scoring, both with memory."""
from __future__ import annotations

import dataclasses
import json
import os

import keras
import tensorflow as tf

from txl.model import TXLConfig


def export(model: keras.Model, cfg: TXLConfig, vocab: list[str] | None, export_dir: str) -> None:
    """A SavedModel with two signatures over (B, Q) int32 tokens and the memory
    (n_layer, B, M, d_model) float32 (zeros of any M to start; M grows up to --mem_len):
    ``serving_default`` -> the next word's log-probabilities ``log_probs`` (B, vocab) and the
    new memory ``new_mems`` (an output named as an input would clash in ONNX);
    ``score`` (also given targets) -> the NLL (B, Q) and the new memory. The memory is float32
    at the signatures under every policy (the model keeps it in its compute dtype)."""
    module = tf.Module()
    # The variables, not the Keras model: saving the model would trace its own default
    # signature, which a call with memories and targets does not have.
    module.weights = [v.value for v in model.variables]
    tokens = tf.TensorSpec([None, None], tf.int32, name="tokens")
    mems = tf.TensorSpec([cfg.n_layer, None, None, cfg.d_model], tf.float32, name="mems")

    @tf.function(input_signature=[tokens, mems])
    def next_word(tokens, mems):
        logp, new = model.log_prob(tokens, tf.unstack(mems, cfg.n_layer))
        return {"log_probs": logp[:, -1], "new_mems": tf.cast(tf.stack(new), tf.float32)}

    @tf.function(input_signature=[tokens, tf.TensorSpec([None, None], tf.int32,
                                                        name="targets"), mems])
    def score(tokens, targets, mems):
        nll, new = model(tokens, tf.unstack(mems, cfg.n_layer), targets, training=False)
        return {"nll": nll, "new_mems": tf.cast(tf.stack(new), tf.float32)}
    module.next_word, module.score = next_word, score
    tf.saved_model.save(module, export_dir,
                        signatures={"serving_default": next_word, "score": score})
    with open(os.path.join(export_dir, "config.json"), "w") as fh:
        json.dump(dataclasses.asdict(cfg), fh, indent=1)
    if vocab:
        with open(os.path.join(export_dir, "vocab.txt"), "w", encoding="utf-8") as fh:
            fh.write("".join(w + "\n" for w in vocab))
