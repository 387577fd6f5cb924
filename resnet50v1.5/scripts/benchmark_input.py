#!/usr/bin/env python
"""Images/s of the ResNet-50 training input pipelines, DALI (CPU) next to tf.data, in one run,
on generated ImageNet-sized JPEGs (smooth random colour fields plus noise, about 500x375).

    python resnet50v1.5/scripts/benchmark_input.py --images 512 --batches 40 --threads 2
"""
import argparse
import io
import os
import runpy
import tempfile
import time

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

import numpy as np  # noqa: E402

from common.runtime import quiet_start  # noqa: E402

with quiet_start.filtered_stderr():  # TensorFlow's start-up lines, as main.py's
    import tensorflow as tf

from common.data import tfrecord_index  # noqa: E402
from rn50 import dali_pipeline, eval_preprocessing, prepare, tfdata_pipeline  # noqa: E402

NVIDIA = eval_preprocessing.nvidia(224)  # the training recipe's normalisation


def generate(out_dir, n, seed=0, shards=4):
    from PIL import Image
    rng = np.random.default_rng(seed)
    paths = [os.path.join(out_dir, f"train-{s:05d}-of-{shards:05d}") for s in range(shards)]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    for i in range(n):
        h, w = int(rng.integers(333, 420)), int(rng.integers(450, 540))
        coarse = rng.uniform(0, 255, (h // 32 + 2, w // 32 + 2, 3)).astype(np.uint8)
        field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), np.float32)
        pixels = np.clip(field + rng.normal(0, 12, field.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        writers[i % shards].write(prepare._example(buf.getvalue(), 1 + i % 1000, "synthetic"))
    for w in writers:
        w.close()
    os.makedirs(os.path.join(out_dir, "idx"))
    for p in paths:
        tfrecord_index.write_index(p, tfrecord_index.index_path(os.path.join(out_dir, "idx"), p))
    return paths


def rate(ds, batches, warmup, batch_size):
    it = iter(ds)
    for _ in range(warmup):
        next(it)[0].numpy()
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)[0].numpy()
    return batches * batch_size / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="DALI CPU threads")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(tmp, args.images)
        mean_kb = sum(os.path.getsize(f) for f in files) / args.images / 1024
        results = {}
        for name in ("tf.data", "DALI (CPU)", "tf.data ", "DALI (CPU) "):  # two A/B rounds
            if name.startswith("DALI"):
                ds = dali_pipeline.dataset(files, os.path.join(tmp, "idx"), args.batch_size, 224,
                                           training=True, num_threads=args.threads, prep=NVIDIA)
            else:
                ds = tfdata_pipeline.dataset(files, args.batch_size, 224, training=True,
                                             prep=NVIDIA)
            results.setdefault(name.strip(), []).append(
                rate(ds, args.batches, args.warmup, args.batch_size))
            del ds
    print(f"{args.images} generated JPEGs (~{mean_kb:.0f} KB), training preprocessing to 224x224,"
          f" batch {args.batch_size}, {args.batches} timed batches per round")
    print("| pipeline | images/s (best of 2 rounds) |\n|---|---|")
    for name, rates in results.items():
        print(f"| {name} | {max(rates):.0f} |")
    print(f"\nratio DALI / tf.data: {max(results['DALI (CPU)']) / max(results['tf.data']):.2f}x")


if __name__ == "__main__":
    main()
