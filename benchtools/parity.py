"""Whether the GPU computes what the CPU computes: the same training steps, from the same
checkpoint on the same batches, run by ``main.py`` on the GPU and on the CPU, then their losses
and weights compared. The CPU tests prove the GPU branches (float16 loss scaling, fused kernels,
DALI's device placement) only by construction; this is the check that a wrong GPU branch cannot
pass. ``scripts/gpu_smoke.sh`` runs it as its ``parity-<model>`` stages.

    python -m benchtools.parity resnet50v1.5 --out DIR [--steps 2] -- --data_dir D --batch_size 16

1. ``start``: one training step on the CPU (``--num_iter 1``, ``--seed``): the checkpoint every
   run starts from, so initialisation cannot differ.
2. Each run copies that checkpoint and trains ``--steps`` more steps with ``--display_every 1``
   (each step's loss logged) and the same ``--seed`` (tf.data's seeded training gives the same
   records and augmentation on any device; DALI is left out, since its GPU decoder differs:
   ``benchtools/dali_compare.py`` compares it): the reference on the CPU in float32 and each
   ``--runs`` entry, ``DEVICE-PRECISION``: ``gpu-fp32`` (TF32 off), ``gpu-amp`` (float16 with
   a static loss scale of ``LOSS_SCALE``, so that no step is skipped while a dynamic scale
   finds its level), ``cpu-fp32``, ``cpu-amp`` (float16 emulated on the CPU). The GPU entries
   run before the reference, so that a GPU TensorFlow cannot use is refused before the CPU's
   run, the slowest at a real model's size.
3. Each run against the reference: the loss of every step (the first one is the forward pass
   on identical weights and batch, the later ones follow the updates) and the update since the
   start, ``|du| / |u|``, of the trained weights and, apart, of the batch-norm statistics (a
   moving average of the forward pass, which moves far more in the first steps and would hide
   the weights), within ``TOLERANCES[precision]``; and a weight checksum (the float64 sum of
   every model variable) for the record.

The tolerances: float32 against float32 differs only by the order of additions (cuDNN's and
oneDNN's algorithms: about 1e-6 relative per operation); float16 adds its rounding (11
significant bits) to every activation and gradient. Measured here, the tiny ResNet with float16
emulated on a CPU against float32: the first step's loss 1.7e-4 apart, the trained weights'
update 0.064 after one step and 0.10 to 0.13 after two (batch-norm statistics 0.002 and 0.04),
then diverging (5e-2 in loss after four: a batch of 8, no warm-up, batch norm): hence two
steps by default, and bounds two to three times those. A wrong GPU branch (a transposed layout,
a gradient scaled twice, a kernel in the wrong type) is off by the whole update or more. The
tests run two CPU float32 runs (identical), float16 on the CPU against float32 (inside the
bounds), and a weight perturbed after training (flagged). Exit status 1 when a comparison
fails.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np

from benchtools import failure
from common import models
from common.errors import reported
from common.runtime.dllogger import read_records, step_logs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS_SCALE = 128
# precision -> (relative loss difference at the first step: the forward pass on identical
# weights and batch; at the later steps; |du| / |u| of the weights at the end)
TOLERANCES = {"fp32": (1e-4, 1e-3, 1e-2), "amp": (2e-3, 2e-2, 0.3)}
PRECISION_FLAGS = {"fp32": ["--no_tf32"],
                   "amp": ["--amp", "--amp_dtype", "float16", "--static_loss_scale",
                           str(LOSS_SCALE)]}
REFERENCE = "cpu-fp32"


@dataclasses.dataclass
class Result:
    run: str
    passed: bool
    loss_rel: float  # largest relative loss difference over the steps
    update_rel: float  # |w_run - w_ref| / |w_ref - w_start|, the larger of the two groups
    checksum: float  # float64 sum of the run's model variables
    reference_checksum: float
    detail: str

    def row(self) -> str:
        return (f"| {self.run} | {'PASS' if self.passed else 'FAIL'} | {self.loss_rel:.2e} | "
                f"{self.update_rel:.2e} | {self.checksum:.6g} / {self.reference_checksum:.6g} |"
                f" {self.detail} |")


def model_weights(model_dir: str) -> dict[str, np.ndarray]:
    """The model's variables in the newest checkpoint of ``model_dir`` (not the optimizer's
    state), by their path from the model ("model/_operations/3/kernel"): the checkpoint files
    the trainable ones under the optimizer's path, which its object graph maps back."""
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    from common.checkpoint import store
    steps = store.on_disk(model_dir)
    if not steps:
        raise ValueError(f"no checkpoint in {model_dir}")
    reader = tf.train.load_checkpoint(os.path.join(model_dir, f"{store.PREFIX}-{steps[0]}"))
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    paths, queue = {0: ""}, [0]  # breadth first from the root: each node's shortest path
    while queue:
        node = queue.pop(0)
        for child in graph.nodes[node].children:
            if child.node_id not in paths:
                paths[child.node_id] = f"{paths[node]}/{child.local_name}".lstrip("/")
                queue.append(child.node_id)
    model_paths, queue = {}, [(0, "")]
    while queue:  # the same, from the model only
        node, path = queue.pop(0)
        for child in graph.nodes[node].children:
            sub = f"{path}/{child.local_name}".lstrip("/")
            if child.node_id not in model_paths and (path or child.local_name == "model"):
                model_paths[child.node_id] = sub
                queue.append((child.node_id, sub))
    out = {}
    for node_id, path in model_paths.items():
        for attr in graph.nodes[node_id].attributes:
            if attr.name == "VARIABLE_VALUE" and "OPTIMIZER_SLOT" not in attr.checkpoint_key:
                out[path] = reader.get_tensor(attr.checkpoint_key).astype(np.float64)
    if not out:
        raise ValueError(f"{model_dir}: the checkpoint holds no model variables")
    return dict(sorted(out.items()))


def step_losses(results_dir: str, model: str) -> dict[int, float]:
    """{step: loss} of every training step a run logged (the last job's, on a resumed run)."""
    loss = models.log_names(model).loss
    logs = [r for r in step_logs(read_records(os.path.join(results_dir, "log.json")))
            if loss in r["data"]]
    return {r["step"][1]: float(r["data"][loss]) for r in logs}


def compare(name: str, precision: str, start: dict, run_w: dict, ref_w: dict,
            run_losses: dict, ref_losses: dict) -> Result:
    """One run against the reference, by ``TOLERANCES[precision]``."""
    first_tol, loss_tol, update_tol = TOLERANCES[precision]
    checksum = float(sum(v.sum() for v in run_w.values()))
    ref_checksum = float(sum(v.sum() for v in ref_w.values()))
    problems = []
    if set(run_w) != set(ref_w) or any(run_w[k].shape != ref_w[k].shape for k in ref_w):
        return Result(name, False, float("nan"), float("nan"), checksum, ref_checksum,
                      "the runs' models differ in their variables")
    steps = sorted(ref_losses)
    if sorted(run_losses) != steps:
        problems.append(f"steps logged {sorted(run_losses)}, the reference {steps}")
    rel = {s: abs(run_losses[s] - ref_losses[s]) / max(abs(ref_losses[s]), 1e-12)
           for s in steps if s in run_losses}
    loss_rel = max(rel.values(), default=float("nan"))
    for s, r in rel.items():
        tol = first_tol if s == steps[0] else loss_tol
        if not np.isfinite(r) or r > tol:
            problems.append(f"loss differs by {r:.2e} at step {s} (tolerance {tol:g}"
                            f"{', the forward pass on the same weights' if s == steps[0] else ''}"
                            f"): {run_losses[s]:.6g} against {ref_losses[s]:.6g}")
            break
    if not rel:
        problems.append("no step's loss to compare")
    diff = {k: np.sqrt(((run_w[k] - ref_w[k]) ** 2).sum()) for k in ref_w}
    update_rel = 0.0
    for group, keys in _groups(ref_w).items():
        update = np.sqrt(sum(((ref_w[k] - start[k]) ** 2).sum() for k in keys))
        rel = float(np.sqrt(sum(diff[k] ** 2 for k in keys)) / max(update, 1e-30))
        update_rel = max(update_rel, rel) if np.isfinite(rel) else float("nan")
        if not np.isfinite(rel) or rel > update_tol:
            worst = max(keys, key=diff.get)
            problems.append(f"{group} differ by {rel:.2e} of their update (tolerance "
                            f"{update_tol:g}), most in {worst}")
    return Result(name, not problems, loss_rel, update_rel, checksum, ref_checksum,
                  "; ".join(problems) or "within tolerance")


def _groups(weights: dict) -> dict[str, list[str]]:
    """The variables compared apart: the trained weights, and batch norm's moving statistics."""
    out = {"weights": [k for k in weights if "moving_" not in k],
           "batch-norm statistics": [k for k in weights if "moving_" in k]}
    return {group: keys for group, keys in out.items() if keys}


def _main_py(model: str) -> str:
    return os.path.join(ROOT, models.MODELS[model].directory, "main.py")


def train(model: str, device: str, flags: list[str], results_dir: str, log) -> None:
    """``main.py FLAGS --results_dir RESULTS_DIR`` on ``device`` (the CPU: no GPU visible)."""
    env = dict(os.environ)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    log(f"[parity] {os.path.basename(results_dir)}: {device}, {' '.join(flags)}")
    proc = subprocess.run([sys.executable, _main_py(model), *flags, "--results_dir",
                           results_dir], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise RuntimeError(f"{os.path.basename(results_dir)} failed: {failure(proc)}")
    if device == "gpu":  # a GPU run that TensorFlow ran on the CPU is no GPU result
        machines = [r["data"].get("machine") for r in read_records(
            os.path.join(results_dir, "log.json")) if r.get("step") == "PARAMETER"]
        machine = machines[-1] if machines else None
        if not machine or machine.endswith("no GPU"):
            raise RuntimeError(f"{os.path.basename(results_dir)}: TensorFlow saw no GPU in this "
                               f"run ({machine or 'no machine recorded'}): its driver or CUDA "
                               "does not match TensorFlow's, or CUDA_VISIBLE_DEVICES hides it; "
                               "nothing was compared")


def run(model: str, out: str, main_flags: list[str], runs: list[str], steps: int = 2,
        seed: int = 1, run_flags: list[str] = (), log=print) -> list[Result]:
    """The start checkpoint, the reference and ``runs`` (with ``run_flags`` besides
    ``main_flags``: a GPU-only option such as ``--data_format NCHW``), each compared with the
    reference."""
    os.makedirs(out, exist_ok=True)
    common = [*main_flags, "--mode", "train", "--iter_unit", "batch", "--display_every", "1",
              "--seed", str(seed)]
    start_dir = os.path.join(out, "start")
    shutil.rmtree(start_dir, ignore_errors=True)
    train(model, "cpu", [*common, *PRECISION_FLAGS["fp32"], "--num_iter", "1", "--model_dir",
                         os.path.join(start_dir, "checkpoints")], start_dir, log)
    start = model_weights(os.path.join(start_dir, "checkpoints"))
    found = {}
    # The GPU runs first: a GPU that TensorFlow cannot use is refused before the CPU reference,
    # the slowest run at a real model's size, is spent (the comparisons wait for all runs).
    for name in sorted([REFERENCE, *runs], key=lambda n: not n.startswith("gpu-")):
        device, precision = name.split("-")
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(start_dir, "checkpoints"), os.path.join(d, "checkpoints"))
        extra = list(run_flags) if name != REFERENCE else []
        train(model, device, [*common, *extra, *PRECISION_FLAGS[precision], "--num_iter",
                              str(1 + steps), "--model_dir", os.path.join(d, "checkpoints")],
              d, log)
        found[name] = (model_weights(os.path.join(d, "checkpoints")), step_losses(d, model))
    ref_w, ref_losses = found[REFERENCE]
    return [compare(name, name.split("-")[1], start, found[name][0], ref_w, found[name][1],
                    ref_losses) for name in runs]


def table(model: str, results: list[Result]) -> str:
    lines = [f"{model}: each run against {REFERENCE}",
             "| run | result | loss rel. diff | weights |du|/|u| | checksum / reference | |",
             "|---|---|---|---|---|---|"]
    lines += [r.row() for r in results]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    main_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 usage="python -m benchtools.parity MODEL --out DIR [options] "
                                       "-- MAIN_PY_FLAGS")
    ap.add_argument("model", choices=sorted(models.MODELS))
    ap.add_argument("--out", required=True, help="the runs' results directories")
    ap.add_argument("--runs", default="gpu-fp32,gpu-amp",
                    help="DEVICE-PRECISION entries compared with cpu-fp32 (device: gpu or "
                         "cpu; precision: fp32 or amp)")
    ap.add_argument("--steps", type=int, default=2, help="steps after the start checkpoint")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run_flags", default="", help="main.py flags for the compared runs only, "
                    "not the CPU reference (a GPU-only option: \"--data_format NCHW\")")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    for r in runs:
        device, _, precision = r.partition("-")
        if device not in ("gpu", "cpu") or precision not in TOLERANCES:
            ap.error(f"--runs: {r} is not DEVICE-PRECISION (gpu or cpu, fp32 or amp)")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    return reported("parity", lambda: _compare(args, runs, main_flags),
                    {RuntimeError: 2, ValueError: 2, OSError: 2})


def _compare(args, runs, main_flags) -> int:
    results = run(args.model, args.out, main_flags, runs, args.steps, args.seed,
                  shlex.split(args.run_flags))
    print(table(args.model, results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "reference": REFERENCE, "steps": args.steps,
                       "summary": "; ".join(
                           f"{r.run} {'ok' if r.passed else 'FAIL'}: loss {r.loss_rel:.1e}, "
                           f"weights {r.update_rel:.1e}" for r in results),
                       "tolerances": TOLERANCES,
                       "results": [dataclasses.asdict(r) for r in results]}, f, indent=1)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
