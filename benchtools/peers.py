"""Each model's training throughput against the Keras model a user would pick instead, side by
side in one run, with FLOP/s and MFU counted the same way for both.

    python -m benchtools.peers ssd320 --rounds 2
    python -m benchtools.peers resnet50v1.5 --rounds 2
    python -m benchtools.peers transformerxl --rounds 2

Each model names its peer and counts its own FLOPs in its ``benchmarks`` module
(``rn50/benchmarks.py``, ``ssd/benchmarks.py``, ``txl/benchmarks.py``), reached through the model
table (``common/models.py``): ResNet-50 v1.5 against ``keras.applications.ResNet50``; SSD320
against keras-hub's ``RetinaNetObjectDetector``; Transformer-XL base against keras-hub's
``GPT2CausalLM`` at its width and depth. Each
peer trains with ``model.fit`` on synthetic data as Keras resolves ``jit_compile="auto"``;
ours is ``main.py --mode training_benchmark``. Every measurement is a process of its own; each
round measures every precision's matmul ceiling, then ours and the peer alternately in each
precision. keras-hub is installed for this script only (benchtools/peer_env.sh; the project's
stack is untouched).

FLOPs: ``common.tools.mfu.graph_flops`` counts the matmuls and convolutions of one forward pass
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

from common import models  # noqa: E402  (no TensorFlow: the model table)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_ENV = os.path.join(ROOT, "benchtools", "peer_env.sh")

# --- the peers (run in a process of their own, under the peer environment's python) -----------
def _policy(precision: str) -> str:
    from common.runtime import devices
    from common.tools.named_precisions import compute_dtype
    dtype = compute_dtype(precision, gpu=bool(devices.physical_gpus()))
    return "float32" if dtype == "float32" else f"mixed_{dtype}"


def peer_child(model: str, precision: str, batch: int, steps: int, warmup: int) -> dict:
    import keras
    import tensorflow as tf

    from common.tools.mfu import graph_flops
    keras.mixed_precision.set_dtype_policy(_policy(precision))
    net, data, items, spec, items_per_spec = models.benchmarks(model).build_peer(batch)
    per_item = graph_flops(lambda x: net(x, training=False), spec) / items_per_spec
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
def ours(model: str, precision: str, batch: int, steps: int, warmup: int) -> float:
    from common.main_py import run_main_py
    from common.runtime.dllogger import last_summary
    with tempfile.TemporaryDirectory() as tmp:
        summary = last_summary(run_main_py(os.path.join(ROOT, model, "main.py"), [
            "--mode", "training_benchmark", *models.benchmarks(model).OUR_FLAGS,
            "--batch_size", str(batch),
            "--iter_unit", "batch", "--num_iter", str(warmup + steps), "--warmup_steps",
            str(warmup), "--display_every", str(warmup + steps),
            *(["--amp"] if precision == "amp" else [])], tmp))
    return summary[models.log_names(model).train_throughput]


def peer(python: str, model: str, precision: str, batch: int, steps: int, warmup: int) -> dict:
    out = subprocess.run([python, "-m", "benchtools.peers", "--child", model, "--precision",
                          precision, "--peer_batch", str(batch), "--steps", str(steps),
                          "--warmup", str(warmup)], check=True, capture_output=True, text=True,
                         cwd=ROOT)
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])


def ceiling_in_process(precision: str) -> float:
    import tensorflow as tf

    from common.tools.mfu import matmul_ceiling
    return matmul_ceiling(tf.float32 if precision == "fp32" else tf.bfloat16)


def table(model: str, rates: dict, ceilings: dict, flops: dict, our_batch: int,
          peer_batch: int, jit_compile) -> str:
    """The README's table: each side's median rate over its rounds, FLOPs, MFU against the
    precision's matmul ceiling, AMP's speed-up and ours against the peer in FLOP/s; the machine
    as this process sees it heads it. ``rates``: (who, precision) -> per-round rates."""
    from common.runtime import devices
    from common.runtime.devices import describe
    name, unit = models.benchmarks(model).PEER, models.MODELS[model].item_unit
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
    p.add_argument("model", choices=sorted(models.MODELS))
    p.add_argument("--precisions", default="fp32,amp")
    p.add_argument("--batch_size", type=int, default=None, help="ours, per step")
    p.add_argument("--peer_batch", type=int, default=None, help="the peer's, per step")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    hooks = models.benchmarks(a.model)  # the model's own part: rn50/benchmarks.py, ...
    name, unit = hooks.PEER, models.MODELS[a.model].item_unit
    peer_batch, our_batch = a.peer_batch or hooks.PEER_BATCH, a.batch_size or hooks.OUR_BATCH
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
    flops = {"ours": hooks.forward_flops(our_batch),
             "peer": next(iter(peer_info.values()))["forward_flops_per_item"]}
    print("\n" + table(a.model, rates, ceilings, flops, our_batch, peer_batch,
                        next(iter(peer_info.values()))["jit_compile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
