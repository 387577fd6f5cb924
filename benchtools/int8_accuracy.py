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
import sys
import time

import numpy as np

from common import main_py, models
from common.runtime.dllogger import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 5


def _hooks(model: str):
    """The model's part (``rn50/benchmarks.py``, ``ssd/benchmarks.py``): its data, recipe,
    validation batches and metric, reached through the model table."""
    return models.benchmarks(model)


def _int8_models() -> list[str]:
    return [m for m in models.MODELS if hasattr(_hooks(m), "int8_data")]


def export(model: str, workdir: str, smoke: bool = False) -> tuple[str, str, list[str]]:
    """Trains (unless ``workdir`` holds the trained run) and exports; returns (records,
    export dir, recipe)."""
    records, recipe = _hooks(model).int8_data(os.path.join(workdir, "data"), smoke)
    script = os.path.join(ROOT, model, "main.py")
    trained = os.path.join(workdir, "train")
    if not any(r.get("step") == [] for r in _records(trained)):
        main_py.run_main_py(script, ["--mode", "train", *recipe, "--data_dir", records],
                           main_py.fresh_results_dir(trained))
    out = os.path.join(workdir, "export")
    main_py.run_main_py(script, ["--mode", "evaluate", *recipe, "--data_dir", records,
                                 "--model_dir", os.path.join(trained, "checkpoints"),
                                 "--export_dir", out, "--export_onnx_int8",
                                 *(["--calibration_images", "16"] if smoke else [])],
                       main_py.fresh_results_dir(os.path.join(workdir, "evaluate")))
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


def accuracy(model: str, records: str, export_dir: str, recipe: list[str]) -> dict:
    """Each file's accuracy on the held-out split by the model's metric (and, ResNet, how often
    INT8's top class agrees with float32's)."""
    hooks = _hooks(model)
    batches = hooks.int8_validation(records, _image_size(recipe))
    files = {"float32": "model.onnx", "int8": "model_int8.onnx"}
    sessions = {f: _session(os.path.join(export_dir, f)) for f in files.values()}

    def run(f, images, named=False):
        s = sessions[f]
        out = s.run(None, {"images": images})
        return dict(zip([o.name for o in s.get_outputs()], out)) if named else out
    return hooks.int8_accuracy(run, files, batches, records)


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
    metrics = _hooks(model).METRICS
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
    p.add_argument("model", choices=sorted(_int8_models()))
    p.add_argument("--workdir", help="data, the trained run and the export (default "
                   "results/int8/MODEL); a trained run there is reused")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--smoke", action="store_true", help="the whole command at a tiny size: "
                   "checks it, measures nothing")
    args = p.parse_args(argv)
    workdir = args.workdir or os.path.join("results", "int8", args.model)
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        p.error(f"--workdir {workdir} is a file, not a directory")
    try:
        import onnxruntime as ort
    except ImportError:
        p.error("onnxruntime is not installed here: pip install onnxruntime (it runs both ONNX "
                "files)")
    from common.errors import UsageError
    from common.export import onnx_int8
    try:
        onnx_int8.require()  # before the training, not after it
    except UsageError as e:
        print(f"int8_accuracy: error: {e}", file=sys.stderr)
        return 2
    records, export_dir, recipe = export(args.model, workdir, args.smoke)
    evaluated = _records(os.path.join(workdir, "evaluate"))
    calibrated = next((r["data"] for r in evaluated if r.get("step") == "PARAMETER"), {})
    from common.runtime.devices import cpu_name
    res = {"model": args.model, "onnxruntime": ort.__version__,
           "machine": cpu_name() + f", {platform.machine()}",
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
