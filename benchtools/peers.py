"""Each model's training throughput against the Keras model a user would pick instead, side by
side in one run, with FLOP/s and MFU counted the same way for both.

    python -m benchtools.peers ssd320 --rounds 2
    python -m benchtools.peers resnet50v1.5 --rounds 2
    python -m benchtools.peers transformerxl --rounds 2

Peers: ResNet-50 v1.5 against ``keras.applications.ResNet50``; SSD320 against keras-hub's
``RetinaNetObjectDetector`` (ResNet-50 v1 backbone, FPN P3-P7, 320x320, 90 classes);
Transformer-XL base against keras-hub's ``GPT2CausalLM`` at the width and depth of NVIDIA's
Transformer-XL base, which ours is (16 layers, d_model 512, 8 heads of 64, inner 2048, the
WikiText-103 vocabulary, tied embeddings, dropout 0.1), trained with Keras' ``Lamb``. Each
peer trains with ``model.fit`` on synthetic data as Keras resolves ``jit_compile="auto"``;
ours is ``main.py --mode training_benchmark``. Every measurement is a process of its own; each
round measures every precision's matmul ceiling, then ours and the peer alternately in each
precision. keras-hub is installed for this script only (benchtools/peer_env.sh; the project's
stack is untouched).

FLOPs: ``benchtools.mfu.graph_flops`` counts the matmuls and convolutions of one forward pass
from the graph TensorFlow traces, for ours and the peer alike; training is 3x forward. MFU is
that over the ceiling of the compute dtype (float32; bfloat16 for AMP on a CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_ENV = os.path.join(ROOT, "benchtools", "peer_env.sh")

# model dir -> (the peer's name, ours' main.py flags besides batch/steps/precision, the
# peer's default rows per step, ours' default batch, the item)
MODELS = {
    "resnet50v1.5": ("keras.applications.ResNet50", ["--arch", "resnet50"], 16, 16, "images"),
    "ssd320": ("keras_hub RetinaNetObjectDetector", [], 8, 8, "images"),
    "transformerxl": ("keras_hub GPT2CausalLM (TXL base width/depth)", [], 8, 32, "tokens"),
}
TXL_BASE = {"num_layers": 16, "hidden_dim": 512, "num_heads": 8, "intermediate_dim": 2048,
            "vocabulary_size": 267735, "seq": 192}


# --- the peers (run in a process of their own, under the peer environment's python) -----------
def _policy(precision: str) -> str:
    from common import devices, presets
    dtype = presets.compute_dtype(precision, gpu=bool(devices.physical_gpus()))
    return "float32" if dtype == "float32" else f"mixed_{dtype}"


def _build_peer(model: str, batch: int):
    """(compiled Keras model, dataset of (x, y), items per step, forward function and input
    spec of one item for the FLOP count)."""
    import keras
    import tensorflow as tf
    if model == "resnet50v1.5":
        net = keras.applications.ResNet50(weights=None)
        net.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.875),
                    loss=keras.losses.CategoricalCrossentropy())
        x = tf.random.normal((batch, 224, 224, 3))
        y = tf.one_hot(tf.random.uniform((batch,), 0, 1000, tf.int32), 1000)
        return net, (x, y), batch, tf.TensorSpec((1, 224, 224, 3))
    import keras_hub
    if model == "ssd320":
        encoder = keras_hub.models.ResNetBackbone(
            input_conv_filters=[64], input_conv_kernel_sizes=[7],
            stackwise_num_filters=[64, 128, 256, 512], stackwise_num_blocks=[3, 4, 6, 3],
            stackwise_num_strides=[1, 2, 2, 2], block_type="bottleneck_block",
            use_pre_activation=False, image_shape=(320, 320, 3))
        backbone = keras_hub.models.RetinaNetBackbone(
            image_encoder=encoder, min_level=3, max_level=7, use_p5=False,
            image_shape=(320, 320, 3))
        net = keras_hub.models.RetinaNetObjectDetector(backbone=backbone, num_classes=90,
                                                       bounding_box_format="yxyx")
        net.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9))  # Huber + focal
        gen = tf.random.Generator.from_seed(1)
        corner = gen.uniform((batch, 10, 2), 0, 220)
        boxes = tf.concat([corner, corner + gen.uniform((batch, 10, 2), 20, 100)], -1)
        labels = tf.cast(gen.uniform((batch, 10), 0, 90, tf.int32), tf.float32)
        x = gen.uniform((batch, 320, 320, 3), -1, 1)  # as the preprocessor scales
        return net, (x, {"boxes": boxes, "labels": labels}), batch, tf.TensorSpec((1, 320, 320, 3))
    if model == "transformerxl":
        c = TXL_BASE
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
        return net, (x, ids[:, 1:]), batch * c["seq"], spec
    raise SystemExit(f"unknown model {model}")


def peer_child(model: str, precision: str, batch: int, steps: int, warmup: int) -> dict:
    import keras
    import tensorflow as tf

    from benchtools.mfu import graph_flops
    keras.mixed_precision.set_dtype_policy(_policy(precision))
    net, data, items, spec = _build_peer(model, batch)
    per_item = graph_flops(lambda x: net(x, training=False), spec) / (
        TXL_BASE["seq"] if model == "transformerxl" else 1)
    ds = tf.data.Dataset.from_tensors(data).repeat()
    clock = _WindowClock(warmup, warmup + steps)
    history = net.fit(ds, steps_per_epoch=warmup + steps, epochs=1, verbose=0, shuffle=False,
                      callbacks=[clock])
    return {"items_per_s": items * steps / clock.seconds, "forward_flops_per_item": per_item,
            "jit_compile": bool(net.jit_compile), "loss": float(history.history["loss"][-1])}


def _WindowClock(warmup: int, last: int):
    """A callback timing batches warmup+1..last of one ``fit`` as ours are timed: the host
    waits for the step (reads its loss) only after the warm-up's last batch and the last one."""
    import keras

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 in (warmup, last):
                float(logs["loss"])  # the sync point
                now = time.perf_counter()
                if batch + 1 == warmup:
                    self.start = now
                else:
                    self.seconds = now - self.start
    return Clock()


# --- ours ------------------------------------------------------------------------------------
def ours_flops(model: str, batch: int) -> float:
    """Forward FLOPs per item of our model, by the same graph count."""
    import tensorflow as tf

    from benchtools.mfu import graph_flops
    if model == "resnet50v1.5":
        from rn50.model import build_resnet
        net = build_resnet("resnet50")
        return graph_flops(lambda x: net(x, training=False), tf.TensorSpec((1, 224, 224, 3)))
    if model == "ssd320":
        from ssd.model import build_ssd
        net = build_ssd("resnet50", 90, 320)
        return graph_flops(lambda x: net(x, training=False), tf.TensorSpec((1, 320, 320, 3)))
    # Transformer-XL's adaptive softmax computes each tail cluster for its tokens only (shapes
    # that depend on the data), so its count is txl/flops.py's, which counts the same matmuls
    # from the configuration and the data's cluster shares (the throughput benchmark's).
    from txl.flops import run_flops_per_token
    return run_flops_per_token(["main.py", "--mode", "training_benchmark", "--batch_size",
                                str(batch), "--log_filename", ""])["train"]


def ours(model: str, precision: str, batch: int, steps: int, warmup: int) -> float:
    from common.dllogger import last_summary
    from common.runs import run_main_py
    with tempfile.TemporaryDirectory() as tmp:
        summary = last_summary(run_main_py(os.path.join(ROOT, model, "main.py"), [
            "--mode", "training_benchmark", *MODELS[model][1], "--batch_size", str(batch),
            "--iter_unit", "batch", "--num_iter", str(warmup + steps), "--warmup_steps",
            str(warmup), "--display_every", str(warmup + steps),
            *(["--amp"] if precision == "amp" else [])], tmp))
    return summary[f"throughput_{MODELS[model][4]}_per_s"]


def peer(python: str, model: str, precision: str, batch: int, steps: int, warmup: int) -> dict:
    out = subprocess.run([python, "-m", "benchtools.peers", "--child", model, "--precision",
                          precision, "--peer_batch", str(batch), "--steps", str(steps),
                          "--warmup", str(warmup)], check=True, capture_output=True, text=True,
                         cwd=ROOT)
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])


def ceiling_in_process(precision: str) -> float:
    import tensorflow as tf

    from benchtools.mfu import matmul_ceiling
    return matmul_ceiling(tf.float32 if precision == "fp32" else tf.bfloat16)


def table(model: str, rates: dict, ceilings: dict, flops: dict, our_batch: int,
          peer_batch: int, jit_compile) -> str:
    """The README's table: each side's median rate over its rounds, FLOPs, MFU against the
    precision's matmul ceiling, AMP's speed-up and ours against the peer in FLOP/s; the machine
    as this process sees it heads it. ``rates``: (who, precision) -> per-round rates."""
    from common import devices
    from common.machine import describe
    name, _, _, _, unit = MODELS[model]
    precisions = list(ceilings)
    rounds = len(next(iter(rates.values())))
    lines = [f"{describe(devices.current().devices)}; matmul ceilings: "
             + ", ".join(f"{pr} {c / 1e9:.0f} GFLOP/s" for pr, c in ceilings.items())
             + f"; {name}: jit_compile={jit_compile}"]
    scale, fl_unit = (1e9, "GFLOP") if unit == "images" else (1e6, "MFLOP")
    lines.append(f"| model | precision | batch | {unit}/s (median of {rounds}) | rounds | "
                 f"training {fl_unit}/{unit[:-1]} | training GFLOP/s | MFU | AMP speed-up | "
                 "ours vs peer, FLOP/s |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for who in ("ours", "peer"):
        for pr in precisions:
            med = statistics.median(rates[(who, pr)])
            fl = 3 * flops[who]
            base = statistics.median(rates[(who, "fp32")]) if "fp32" in precisions else med
            mine = statistics.median(rates[("ours", pr)]) * 3 * flops["ours"]
            theirs = statistics.median(rates[("peer", pr)]) * 3 * flops["peer"]
            lines.append(
                f"| {'this repository' if who == 'ours' else name} | {pr} | "
                f"{our_batch if who == 'ours' else peer_batch} | {med:.2f} | "
                f"{', '.join(f'{v:.2f}' for v in rates[(who, pr)])} | {fl / scale:.1f} | "
                f"{med * fl / 1e9:.0f} | {med * fl / ceilings[pr]:.0%} | {med / base:.2f}x | "
                f"{mine / theirs:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--precisions", default="fp32,amp")
    p.add_argument("--batch_size", type=int, default=None, help="ours, per step")
    p.add_argument("--peer_batch", type=int, default=None, help="the peer's, per step")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    name, _, peer_batch, our_batch, unit = MODELS[a.model]
    peer_batch, our_batch = a.peer_batch or peer_batch, a.batch_size or our_batch
    if a.child:
        print(json.dumps(peer_child(a.model, a.precision, peer_batch, a.steps, a.warmup)))
        return 0
    python = subprocess.run(["bash", PEER_ENV], check=True, capture_output=True,
                            text=True).stdout.split()[-1]
    precisions = a.precisions.split(",")
    rates = {(who, pr): [] for pr in precisions for who in ("ours", "peer")}
    ceilings, peer_info = dict.fromkeys(precisions, 0.0), {}
    for r in range(1, a.rounds + 1):
        for pr in precisions:
            ceilings[pr] = max(ceilings[pr], ceiling_in_process(pr))
            rates[("ours", pr)].append(ours(a.model, pr, our_batch, a.steps, a.warmup))
            peer_info[pr] = peer(python, a.model, pr, peer_batch, a.steps, a.warmup)
            rates[("peer", pr)].append(peer_info[pr]["items_per_s"])
            print(f"round {r} {pr}: ours {rates[('ours', pr)][-1]:.2f} {unit}/s, {name} "
                  f"{rates[('peer', pr)][-1]:.2f} {unit}/s", flush=True)
    flops = {"ours": ours_flops(a.model, our_batch),
             "peer": next(iter(peer_info.values()))["forward_flops_per_item"]}
    print("\n" + table(a.model, rates, ceilings, flops, our_batch, peer_batch,
                        next(iter(peer_info.values()))["jit_compile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
