"""INT8 ONNX against float32 ONNX: accuracy on held-out data and latency, both under ONNX
Runtime on this machine's CPU, for the exports of ``--export_onnx_int8``.

    python -m benchtools.int8_accuracy resnet50v1.5 --workdir results/int8/resnet50v1.5
    python -m benchtools.int8_accuracy ssd320 --workdir results/int8/ssd320

Each model is trained as its demo or learning check trains it, on data nothing downloads:
ResNet-50 v1.5 on scikit-learn's handwritten digits at 32x32 (3 epochs, ``make demo``'s recipe),
SSD320 with the tiny trunk on the generated shapes at 128x128 (``ssd320/scripts/
learning_check.py``'s 1,800 steps, FP32, seed 1). Then one ``--mode evaluate`` run of its
``main.py`` writes the float32 and the INT8 ONNX files (calibrated on training images), and
both are run by ONNX Runtime on the held-out split: top-1 and top-5 (ResNet), COCO AP, AP50 and
AP75 by pycocotools (SSD, through the NMS inside ``model.onnx``), the share of images whose top
class (ResNet) agrees, and the median latency of a batch of 1 and of 32, measured in
alternating rounds. A model already trained in ``--workdir`` is reused.

These are ONNX Runtime's CPU kernels, not TensorRT's: they show what calibration costs in
accuracy, not what INT8 gains in speed on a GPU.

``--smoke`` runs the whole command at a tiny size (the tiny networks on a few images, a few
steps, 16 calibration images, one latency round): it checks the command, it measures nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

from common import machine, runs
from common.dllogger import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 5


def _prepare_resnet(data: str, smoke: bool = False) -> tuple[str, list[str]]:
    from rn50 import digits
    if not os.path.exists(os.path.join(data, "records", "labels.txt")):
        digits.export(os.path.join(data, "folder"), size=32, limit=200 if smoke else None)
        subprocess.run([sys.executable, os.path.join(ROOT, "resnet50v1.5", "prepare_dataset.py"),
                        os.path.join(data, "folder"), os.path.join(data, "records"),
                        "--train_shards", "4", "--val_shards", "2"], check=True,
                       stdout=subprocess.DEVNULL)
    recipe = ["--preset", "digits", "--image_size", "32", "--seed", "1"]  # as make demo
    if smoke:
        recipe += ["--arch", "resnet_tiny", "--num_iter", "1"]
    return os.path.join(data, "records"), recipe





def _prepare_ssd(data: str, smoke: bool = False) -> tuple[str, list[str]]:
    from ssd import shapes
    if not os.path.exists(os.path.join(data, "records", "label_map.json")):
        shapes.export(os.path.join(data, "coco"), train=40 if smoke else 600,
                      val=8 if smoke else 100, seed=0)
        subprocess.run([sys.executable, os.path.join(ROOT, "ssd320", "prepare_dataset.py"),
                        os.path.join(data, "coco"), os.path.join(data, "records"),
                        "--train_shards", "4", "--val_shards", "1"], check=True,
                       stdout=subprocess.DEVNULL)
    recipe = ["--preset", "shapes", "--image_size", "128", "--iter_unit", "batch",
              "--num_iter", "1800", "--seed", "1"]  # as the learning check
    if smoke:
        recipe += ["--image_size", "64", "--batch_size", "4", "--lr_warmup_steps", "2",
                   "--num_iter", "4"]
    return os.path.join(data, "records"), recipe


MODELS = {"resnet50v1.5": _prepare_resnet, "ssd320": _prepare_ssd}


def export(model: str, workdir: str, smoke: bool = False) -> tuple[str, str, list[str]]:
    """Trains (unless ``workdir`` holds the trained run) and exports; returns (records,
    export dir, recipe)."""
    records, recipe = MODELS[model](os.path.join(workdir, "data"), smoke)
    main_py = os.path.join(ROOT, model, "main.py")
    trained = os.path.join(workdir, "train")
    if not any(r.get("step") == [] for r in _records(trained)):
        runs.run_main_py(main_py, ["--mode", "train", *recipe, "--data_dir", records],
                           runs.fresh_results_dir(trained))
    out = os.path.join(workdir, "export")
    runs.run_main_py(main_py, ["--mode", "evaluate", *recipe, "--data_dir", records,
                                 "--model_dir", os.path.join(trained, "checkpoints"),
                                 "--export_dir", out, "--export_onnx_int8",
                                 *(["--calibration_images", "16"] if smoke else [])],
                       runs.fresh_results_dir(os.path.join(workdir, "evaluate")))
    return records, out, recipe


def _image_size(recipe: list[str]) -> int:
    """The recipe's image size (its last --image_size: a later flag wins, as main.py reads)."""
    at = len(recipe) - 1 - recipe[::-1].index("--image_size")
    return int(recipe[at + 1])


def _records(run_dir: str) -> list:
    try:
        return read_records(os.path.join(run_dir, "log.json"))
    except OSError:
        return []


def _session(path: str):
    import onnxruntime as ort
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def _validation(model: str, records: str, recipe: list[str]):
    """The held-out split's batches of 32 through the same tf.data pipeline evaluation uses."""
    import glob
    files = sorted(glob.glob(os.path.join(records, "validation-*")))
    size = _image_size(recipe)
    if model == "resnet50v1.5":
        from rn50 import tfdata_pipeline
        return [(x.numpy(), y.numpy()) for x, y in
                tfdata_pipeline.dataset(files, 32, size, False, num_classes=10)]
    from ssd import anchors, tfdata_pipeline
    with open(os.path.join(records, "label_map.json")) as f:
        classes = json.load(f)["num_classes"]
    data = tfdata_pipeline.dataset(files, 32, size, False, anchors.generate(size), classes)
    return [{k: v.numpy() for k, v in b.items() if k in ("images", "image_id", "height",
                                                          "width")} for b in data]


def accuracy(model: str, records: str, export_dir: str, recipe: list[str]) -> dict:
    """Each file's accuracy on the held-out split (and, ResNet, how often INT8's top class
    agrees with float32's)."""
    batches = _validation(model, records, recipe)
    files = {"float32": "model.onnx", "int8": "model_int8.onnx"}
    out = {}
    if model == "resnet50v1.5":
        top = {}
        for name, f in files.items():
            s = _session(os.path.join(export_dir, f))
            logits = np.concatenate([s.run(None, {"images": x})[0] for x, _ in batches])
            labels = np.concatenate([y for _, y in batches])  # 0-based, as the pipeline gives
            order = np.argsort(-logits, axis=1)
            top[name] = order[:, 0]
            out[name] = {"top1": float(np.mean(order[:, 0] == labels)),
                         "top5": float(np.mean((order[:, :5] == labels[:, None]).any(1))),
                         "images": int(len(labels))}
        out["int8"]["top1_agreement"] = float(np.mean(top["int8"] == top["float32"]))
        return out
    from ssd import coco_eval
    gt = coco_eval.ground_truth(os.path.join(records, "validation_annotations.json"))
    for name, f in files.items():
        s = _session(os.path.join(export_dir, f))
        names = [o.name for o in s.get_outputs()]
        parts = []
        for b in batches:
            det = dict(zip(names, s.run(None, {"images": b["images"]})))
            parts.append({**det, "image_id": b["image_id"], "height": b["height"],
                          "width": b["width"]})
        merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        stats = coco_eval.evaluate(gt, coco_eval.to_coco(merged), merged["image_id"])
        out[name] = {k: float(stats[k]) for k in ("AP", "AP50", "AP75")}
        out[name]["images"] = int(len(merged["image_id"]))
    return out


def latency(export_dir: str, image_size: int, batches=(1, 32), repeats: int = 20,
            rounds: int = ROUNDS) -> dict:
    """Median milliseconds per batch, float32 and INT8 measured in alternating rounds."""
    files = {"float32": "model.onnx", "int8": "model_int8.onnx"}
    sessions = {k: _session(os.path.join(export_dir, f)) for k, f in files.items()}
    rng = np.random.default_rng(0)
    times = {(k, b): [] for k in files for b in batches}
    for b in batches:
        x = rng.random((b, image_size, image_size, 3), dtype=np.float32)
        for s in sessions.values():  # warm-up
            s.run(None, {"images": x})
        for _ in range(rounds):
            for k, s in sessions.items():
                t = time.perf_counter()
                for _ in range(repeats):
                    s.run(None, {"images": x})
                times[(k, b)].append(1000 * (time.perf_counter() - t) / repeats)
    return {f"{k}_batch{b}_ms": statistics.median(v) for (k, b), v in times.items()}


def report(model: str, res: dict) -> str:
    metrics = ("top1", "top5") if model == "resnet50v1.5" else ("AP", "AP50", "AP75")
    lines = [f"| {model} | " + " | ".join(metrics) + " | batch 1 ms | batch 32 ms |",
             "|---|" + "---:|" * (len(metrics) + 2)]
    for name in ("float32", "int8"):
        acc = res["accuracy"][name]
        lines.append(f"| {name} ONNX | " + " | ".join(f"{acc[m]:.4f}" for m in metrics)
                     + f" | {res['latency'][f'{name}_batch1_ms']:.2f}"
                     f" | {res['latency'][f'{name}_batch32_ms']:.1f} |")
    n = res["accuracy"]["float32"]["images"]
    note = (f"{n} held-out images; ONNX Runtime {res['onnxruntime']} on {res['machine']}; "
            f"INT8 calibrated on {res['calibrated_on']}")
    if "top1_agreement" in res["accuracy"]["int8"]:
        agree = res["accuracy"]["int8"]["top1_agreement"]
        note += f"; INT8's top class equals float32's on {agree:.1%} of the images"
    return "\n".join(lines + ["", note])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchtools.int8_accuracy",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--workdir", help="data, the trained run and the export (default "
                   "results/int8/MODEL); a trained run there is reused")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--smoke", action="store_true", help="the whole command at a tiny size: "
                   "checks it, measures nothing")
    args = p.parse_args(argv)
    import onnxruntime as ort
    workdir = args.workdir or os.path.join("results", "int8", args.model)
    records, export_dir, recipe = export(args.model, workdir, args.smoke)
    evaluated = _records(os.path.join(workdir, "evaluate"))
    calibrated = next((r["data"] for r in evaluated if r.get("step") == "PARAMETER"), {})
    res = {"model": args.model, "onnxruntime": ort.__version__,
           "machine": machine.cpu_name() + f", {platform.machine()}",
           "calibrated_on": f"{calibrated.get('calibration_images', '?')} training images",
           "accuracy": accuracy(args.model, records, export_dir, recipe),
           "latency": latency(export_dir, _image_size(recipe),
                              repeats=2 if args.smoke else 20, rounds=1 if args.smoke else ROUNDS)}
    print(report(args.model, res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
