#!/usr/bin/env python
"""Training throughput side by side: this repository's ResNet-50 v1.5 ``training_benchmark``
against ``keras.applications.ResNet50`` trained with ``model.fit``, under the same settings
(float32, synthetic 224x224 images, batch 16, SGD with momentum), alternating A/B rounds in
one process. Reports images/s, the ratio, and MFU: training FLOP/s over the float32 matmul
ceiling measured in the same run.

    python resnet50v1.5/scripts/benchmark_vs_keras.py --steps 20 --warmup 5 --rounds 3
"""
import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf

from benchtools.mfu import forward_flops, matmul_ceiling
from common import runner
from rn50.model import build_resnet
from rn50.task import ResNetTask


def ours(batch, steps, warmup, xla=False) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        s = runner.run(ResNetTask, [
            "main.py", "--mode", "training_benchmark", "--arch", "resnet50", "--batch_size",
            str(batch), "--iter_unit", "batch", "--num_iter", str(warmup + steps),
            "--warmup_steps", str(warmup), "--display_every", str(warmup + steps),
            "--results_dir", tmp, "--log_filename", ""] + (["--xla"] if xla else []))
    return s["throughput_images_per_s"]


class _StepTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])  # wait for the step, as the repository's loop does
        self.times.append(time.perf_counter())


def keras_fit(batch, steps, warmup) -> float:
    model = keras.applications.ResNet50(weights=None)
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.875),
                  loss=keras.losses.CategoricalCrossentropy())
    x = tf.random.normal((batch, 224, 224, 3))
    y = tf.one_hot(tf.random.uniform((batch,), 0, 1000, tf.int32), 1000)
    timer = _StepTimes()
    model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), steps_per_epoch=warmup + steps,
              epochs=1, verbose=0, callbacks=[timer])
    keras_fit.jit_compile = model.jit_compile  # what compile(jit_compile="auto") resolved to
    return batch * steps / (timer.times[-1] - timer.times[warmup - 1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--steps", type=int, default=20, help="timed steps per round")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per round (>= 1)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    keras.mixed_precision.set_dtype_policy("float32")
    ceiling = matmul_ceiling()
    ours_rates, xla_rates, keras_rates = [], [], []
    for r in range(args.rounds):
        ours_rates.append(ours(args.batch_size, args.steps, args.warmup))
        keras_rates.append(keras_fit(args.batch_size, args.steps, args.warmup))
        xla_rates.append(ours(args.batch_size, args.steps, args.warmup, xla=True))
        print(f"round {r + 1}: ours {ours_rates[-1]:.2f} img/s, keras.applications "
              f"{keras_rates[-1]:.2f} img/s, ours --xla {xla_rates[-1]:.2f} img/s", flush=True)
    ours_flops = 3 * forward_flops(build_resnet("resnet50"))  # forward + 2x for backward
    keras_flops = 3 * forward_flops(keras.applications.ResNet50(weights=None))
    o, k, ox = (statistics.median(r) for r in (ours_rates, keras_rates, xla_rates))
    print(f"\nmatmul ceiling (float32, 2048^3): {ceiling / 1e9:.0f} GFLOP/s")
    print(f"| model (float32, 224x224, batch {args.batch_size}) | images/s (median of "
          f"{args.rounds}) | training GFLOP/image | MFU |")
    print("|---|---|---|---|")
    print(f"| this repository, training_benchmark | {o:.2f} | {ours_flops / 1e9:.1f} | "
          f"{o * ours_flops / ceiling:.0%} |")
    print(f"| keras.applications.ResNet50 + fit (jit_compile={keras_fit.jit_compile}) | {k:.2f} | "
          f"{keras_flops / 1e9:.1f} | {k * keras_flops / ceiling:.0%} |")
    print(f"| this repository, training_benchmark --xla | {ox:.2f} | {ours_flops / 1e9:.1f} | "
          f"{ox * ours_flops / ceiling:.0%} |")
    print(f"\nratio (ours / keras.applications): {o / k:.2f}x; with --xla: {ox / k:.2f}x")


if __name__ == "__main__":
    main()
