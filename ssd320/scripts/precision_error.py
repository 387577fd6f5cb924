#!/usr/bin/env python
"""How far each AMP precision's training gradients are from float32's, part by part of SSD, at
one checkpoint and on the same batches: the rounding a training step sees, without training.

The learning check (learning_check.py) measures what rounding does to accuracy, but it trains:
float16 on a CPU has no fast convolutions in TensorFlow (about 70 times slower than bfloat16 on
the AVX512-FP16 Xeon of docs/performance/ssd320.md), so its check is out of reach there, and
one gradient per precision is not. Each precision is a fresh model under Keras' policy (with
``--float32_parts`` as main.py's) given the checkpoint's weights; float16 computes its loss
scaled by 2^15, the loss scale Keras' LossScaleOptimizer starts from, and divides it out, as
training does. Prints, per precision, the loss's relative difference and, per part of the
network (trunk, fpn, towers, heads), the gradient's relative error ||g - g32|| / ||g32|| and
its cosine to float32's, over all the part's weights and the batches.

    python ssd320/scripts/precision_error.py \\
        --checkpoint results/learning/ssd320/fp32-1/checkpoints \\
        --data_dir DIR/records [--batches 2] [--batch_size 16]
"""
import argparse
import inspect
import os
import runpy
import sys

# The checkout's root, then its model packages, ahead of any installed copy (the entry every
# script starts from): SSD builds its trunk from rn50, as main.py does.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from common import precision  # noqa: E402
from common.checkpoint import settings as recorded_settings  # noqa: E402
from common.checkpoint import store  # noqa: E402
from common.errors import DataError, one_line, reported  # noqa: E402
from ssd import anchors as anchor_gen  # noqa: E402
from ssd import losses, tfdata_pipeline  # noqa: E402
from ssd.model import FLOAT32_PARTS as PARTS  # noqa: E402
from ssd.model import build_ssd, part_of  # noqa: E402

# The precisions compared with float32: name -> (Keras policy, the parts kept in float32).
VARIANTS = {"float32": ("float32", ()),  # again: the floor, what runs of one precision differ
            "bfloat16": ("mixed_bfloat16", ()), "bfloat16+fpn": ("mixed_bfloat16", ("fpn",)),
            "float16": ("mixed_float16", ()), "float16+fpn": ("mixed_float16", ("fpn",))}
# The scale the trainer's dynamic loss scaling starts from (common.precision.LossScaleOptimizer).
LOSS_SCALE = float(inspect.signature(keras.optimizers.LossScaleOptimizer).parameters[
    "initial_scale"].default)


def gradients(policy: str, parts, settings: dict, prefix: str, batches) -> tuple:
    """(mean loss, {part: flat gradient}) of the checkpoint's weights under ``policy``."""
    with precision.dtype_policy(policy):
        model = build_ssd(settings["arch"], settings["num_classes"], settings["image_size"],
                          float32_parts=parts, trunk=settings["trunk"],
                          padding=settings.get("padding", "same"))
    store.load_weights(model, model, prefix, "--checkpoint")
    scale = LOSS_SCALE if policy == "mixed_float16" else 1.0
    total, grads = 0.0, None
    for batch in batches:
        with tf.GradientTape() as tape:
            out = model(batch["images"], training=True)
            loss = losses.detection_loss(out["cls_logits"], out["box_codes"], batch["cls"],
                                         batch["box"])[0]
            scaled = loss * scale
        g = [x / scale for x in tape.gradient(scaled, model.trainable_weights)]
        if not all(np.isfinite(x.numpy()).all() for x in g):
            raise SystemExit(f"precision_error: error: {policy} gradients overflow at loss "
                             f"scale {scale:g}")
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        total += float(loss)
    by_part = {p: [] for p in PARTS}
    for w, g in zip(model.trainable_weights, grads):
        by_part[part_of(w.path.split("/")[0])].append(tf.reshape(tf.cast(g, tf.float64), [-1]))
    return total / len(batches), {p: tf.concat(v, 0).numpy() for p, v in by_part.items() if v}


def compare(reference: tuple, other: tuple) -> dict:
    loss32, g32 = reference
    loss, g = other
    out = {"loss": (loss - loss32) / loss32}
    for p, ref in g32.items():
        diff = np.linalg.norm(g[p] - ref) / np.linalg.norm(ref)
        cosine = float(np.dot(g[p], ref) / (np.linalg.norm(g[p]) * np.linalg.norm(ref)))
        out[p] = (float(diff), cosine)
    return out


# What the script reads of the checkpoint's settings record to build the network.
NEEDED = ("arch", "num_classes", "image_size", "trunk")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a checkpoint prefix or directory of "
                   "ssd320/main.py's (its settings.json beside it)")
    p.add_argument("--data_dir", required=True, help="the prepared records (train-*)")
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--seed", type=int, default=1, help="the batches' crops and order")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"any of {', '.join(VARIANTS)}")
    args = p.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(VARIANTS):
        p.error(f"--variants takes any of {', '.join(VARIANTS)}")
    if args.batches < 1 or args.batch_size < 1:
        p.error("--batches and --batch_size must be 1 or more")
    return reported("precision_error.py", lambda: _measure(args, variants),
                    {DataError: 2, OSError: 2})


def _measure(args, variants) -> int:
    """The table; a ``DataError`` (one line) for a checkpoint or records it cannot use."""
    prefix = store.resolve(args.checkpoint, "--checkpoint")
    found = recorded_settings.read(prefix)
    if not found:
        raise DataError(f"--checkpoint {args.checkpoint}: no settings.json beside it (not a "
                        "checkpoint of ssd320/main.py?)")
    if found["model"] != "ssd320":
        raise DataError(f"--checkpoint {args.checkpoint} is a checkpoint of {found['model']}, "
                        "not of ssd320")
    settings = found["settings"]
    missing = [k for k in NEEDED if k not in settings]
    if missing:
        raise DataError(f"--checkpoint {args.checkpoint}: its settings.json lacks "
                        f"{', '.join(missing)} (written by an older ssd320/main.py?): the "
                        "network cannot be built as it was trained")
    files = sorted(tf.io.gfile.glob(os.path.join(args.data_dir, "train-*")))
    if not files:
        raise DataError(f"--data_dir {args.data_dir} holds no train-* records")
    anchors = anchor_gen.generate(settings["image_size"])
    ds = tfdata_pipeline.dataset(files, args.batch_size, settings["image_size"], True, anchors,
                                 settings["num_classes"], seed=args.seed)
    try:
        batches = list(ds.take(args.batches))
    except tf.errors.OpError as e:
        raise DataError(f"--data_dir {args.data_dir}: its train-* records cannot be read as "
                        f"SSD320's ({one_line(e.message)})") from None
    if len(batches) < args.batches:
        raise DataError(f"--data_dir {args.data_dir}: its train-* records hold fewer than "
                        f"{args.batches} batch(es) of {args.batch_size}")
    reference = gradients("float32", (), settings, prefix, batches)
    print(f"float32: loss {reference[0]:.4f} over {args.batches} batch(es) of "
          f"{args.batch_size}, checkpoint {prefix}")
    print("| precision | loss vs float32 | " + " | ".join(
        f"{part} grad error (cosine)" for part in reference[1]) + " |")
    print("|---|---:|" + "---:|" * len(reference[1]))
    for name in variants:
        r = compare(reference, gradients(*VARIANTS[name], settings, prefix, batches))
        print(f"| {name} | {r['loss']:+.2%} | " + " | ".join(
            f"{r[part][0]:.2%} ({r[part][1]:.4f})" for part in reference[1]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
