"""What the benchmark tools (``benchtools/``) ask of Transformer-XL: they stand above the models
and reach this module through the model table (``common.models.MODELS``), never by name.

``benchtools.peers``: keras-hub's ``GPT2CausalLM`` at the width and depth of NVIDIA's
Transformer-XL base, which ours is (16 layers, d_model 512, 8 heads of 64, inner 2048, the
WikiText-103 vocabulary, tied embeddings, dropout 0.1), trained by ``fit`` with Keras' ``Lamb``;
and the forward FLOPs of ours per token (``txl/flops.py``: the adaptive softmax's tail clusters
have data-dependent shapes that a traced graph cannot count). No INT8 export.
"""
from __future__ import annotations

PEER = "keras_hub GPT2CausalLM (TXL base width/depth)"
PEER_BATCH, OUR_BATCH = 8, 32  # rows per step: the peer's full softmax needs 4x the memory
OUR_FLAGS: list[str] = []
BASE = {"num_layers": 16, "hidden_dim": 512, "num_heads": 8, "intermediate_dim": 2048,
        "vocabulary_size": 267735, "seq": 192}


def build_peer(batch: int):
    """(compiled Keras model, one batch, tokens per step, input spec of one row, tokens per
    row): for ``benchtools.peers``, in its environment (keras-hub)."""
    import keras
    import keras_hub
    import tensorflow as tf
    c = BASE
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
        num_heads=c["num_heads"], hidden_dim=c["hidden_dim"],
        intermediate_dim=c["intermediate_dim"], dropout=0.1, max_sequence_length=c["seq"])
    net = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    net.compile(optimizer=keras.optimizers.Lamb(1e-3, weight_decay=0.01))
    ids = tf.random.uniform((batch, c["seq"] + 1), 0, c["vocabulary_size"], tf.int32)
    x = {"token_ids": ids[:, :-1], "padding_mask": tf.ones((batch, c["seq"]), tf.bool)}
    spec = {"token_ids": tf.TensorSpec((1, c["seq"]), tf.int32),
            "padding_mask": tf.TensorSpec((1, c["seq"]), tf.bool)}
    return net, (x, ids[:, 1:]), batch * c["seq"], spec, c["seq"]


def forward_flops(batch: int) -> float:
    """Forward FLOPs per token of ours, from the configuration and the data's cluster shares
    (the throughput benchmark's count)."""
    from txl.flops import run_flops_per_token
    return run_flops_per_token(["main.py", "--mode", "training_benchmark", "--batch_size",
                                str(batch), "--log_filename", ""])["train"]
