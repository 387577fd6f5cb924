"""Whether a model's DALI pipeline computes on a GPU what it computes on the CPU: the same graph
(``<model>/dali_pipeline.build_pipeline``) built twice from the same records and seed, once on
GPU 0 (nvJPEG ``mixed`` decoding, every later operator on the GPU) and once in DALI's CPU-only
mode, the batches compared output by output. Needs DALI, not TensorFlow, so it also runs on a
GPU machine that has no TensorFlow.

    python -m benchtools.dali_compare resnet50v1.5 --data_dir DIR [--batches 3] [--json OUT]
    python -m benchtools.dali_compare transformerxl --data_dir DIR --devices cpu,cpu  # a check

What must agree, and how closely:
- labels, boxes, classes, box counts, image ids and sizes, tokens: exactly. They are read and
  transformed on the host in both placements (random crops and flips draw from the same seed).
- evaluation images: mean absolute difference (normalised units) within ``IMAGE_BOUNDS``. The
  two JPEG decoders (nvJPEG and libjpeg-turbo) round their IDCT and chroma upsampling
  differently; resizing spreads it. The bounds are twice what an H200 gave (ResNet-50 0.0065,
  SSD320 0.038: SSD resizes to 320 without antialiasing, which keeps each pixel's difference).
- training images: the same crop windows on both (their boxes agree exactly), decoded by
  different decoders after the crop; reported, and held to the evaluation bound times
  ``TRAIN_IMAGE_FACTOR`` (a decoder crops at MCU boundaries before it scales).
- every output of the GPU pipeline is a GPU tensor list (nothing fell back to the host).
- float16 images (AMP's input) against the float32 CPU images: the same bound, float16's
  rounding (about 0.002 at the normalised range) well inside it.

Exit status 1 when any comparison fails. ``compare_outputs`` is the comparison itself; the tests
run it on CPU against CPU (identical) and on deliberately perturbed arrays (flagged).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import tempfile

import numpy as np

from common import models
from common.data import dali_graph, tfrecord_index

# Mean absolute difference allowed between GPU and CPU evaluation images (normalised units).
IMAGE_BOUNDS = {"resnet50v1.5": 0.013, "ssd320": 0.076}
TRAIN_IMAGE_FACTOR = 3.0
# Outputs compared as images; every other output must be identical.
IMAGE_OUTPUTS = {"images"}


@dataclasses.dataclass
class Comparison:
    split: str  # "train", "eval", "eval-float16"...
    output: str
    passed: bool
    detail: str  # the figures: "identical", "mean |diff| 0.0061 (bound 0.013), max 0.33"

    def row(self) -> str:
        return f"| {self.split} | {self.output} | {'PASS' if self.passed else 'FAIL'} | " \
               f"{self.detail} |"


def compare_outputs(split: str, names, first: list[np.ndarray], second: list[np.ndarray],
                    image_bound: float) -> list[Comparison]:
    """Each named output of two runs of one pipeline: images within ``image_bound`` (mean
    absolute difference), everything else identical (shape, dtype-independent values)."""
    out = []
    for name, a, b in zip(names, first, second):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            out.append(Comparison(split, name, False, f"shapes differ: {a.shape} and {b.shape}"))
            continue
        if name in IMAGE_OUTPUTS:
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            mean, peak = float(diff.mean()) if diff.size else 0.0, float(diff.max(initial=0.0))
            finite = bool(np.isfinite(a).all() and np.isfinite(b).all())
            out.append(Comparison(split, name, finite and mean <= image_bound,
                                  f"mean |diff| {mean:.4f} (bound {image_bound:.4f}), "
                                  f"max {peak:.3f}" + ("" if finite else ", not finite")))
        else:
            same = np.array_equal(a, b)
            where = "" if same else f", {int(np.sum(a != b))} of {a.size} values differ"
            out.append(Comparison(split, name, same, ("identical" if same else "differ") + where))
    return out


# A feature every record of each image model's data has: another model's records lack it.
RECORD_KEYS = {"resnet50v1.5": b"image/class/label", "ssd320": b"image/object/bbox/xmin"}


def _first_shard(data_dir: str, split: str, model: str | None = None) -> list[str]:
    files = tfrecord_index.shard_files(data_dir, split, "prepare them with prepare_dataset.py")
    key = RECORD_KEYS.get(model)
    if key and files:
        import struct
        with open(files[0], "rb") as f:
            head = f.read(12)
            record = f.read(struct.unpack("<Q", head[:8])[0]) if len(head) == 12 else b""
        if key not in record:
            raise ValueError(f"{files[0]}: its records are not {model}'s (no {key.decode()} "
                             "feature): give the --data_dir that model's prepare_dataset.py "
                             "wrote")
    return files[:1]  # a few batches: one shard is enough, and its index is quick to write


def _indexes(files, idx_dir: str) -> None:
    for path in files:
        tfrecord_index.write_index(path, tfrecord_index.index_path(idx_dir, path))


def pipelines(model: str, data_dir: str, idx_dir: str, image_size: int | None, batch_size: int,
              tgt_len: int = 64):
    """{split: (output names, build(where) -> @pipeline_def function)} for ``model``."""
    pipe = importlib.import_module(f"{models.MODELS[model].package}.dali_pipeline")
    if model == "transformerxl":
        path = os.path.join(data_dir, "train.npy")
        return {"train": (("inputs", "targets"), lambda where: pipe.build_pipeline(
            path, batch_size, tgt_len, where=where))}
    size = image_size or {"resnet50v1.5": 224, "ssd320": 320}[model]
    # ResNet-50's evaluation recipe, which its pipelines take (NVIDIA's: its DALI and tf.data
    # pipelines' own agreement is what is compared); SSD320 has one preparation.
    recipe = ({"prep": importlib.import_module("rn50.eval_preprocessing").nvidia(size)}
              if model == "resnet50v1.5" else {})
    out = {}
    for split, training in (("train", True), ("eval", False)):
        files = _first_shard(data_dir, "train" if training else "validation", model)
        _indexes(files, idx_dir)
        out[split] = (pipe.NAMES, lambda where, files=files, training=training:
                      pipe.build_pipeline(files, idx_dir, training, size, where=where,
                                          **recipe))
    return out


def run_pipeline(pipeline_def, where: dali_graph.Placement, batch_size: int, batches: int,
                 seed: int) -> tuple[list[list[np.ndarray]], bool]:
    """(per output, the concatenated batches as numpy), whether every output of every batch
    was on the GPU."""
    from nvidia.dali.backend import TensorListGPU
    pipe = pipeline_def(batch_size=batch_size, num_threads=4, device_id=where.device_id,
                        seed=seed, prefetch_queue_depth=1)
    pipe.build()
    got, on_gpu = None, True
    for _ in range(batches):
        outputs = pipe.run()
        on_gpu &= all(isinstance(o, TensorListGPU) for o in outputs)
        arrays = [np.asarray((o.as_cpu() if isinstance(o, TensorListGPU) else o).as_array())
                  for o in outputs]
        got = [[a] for a in arrays] if got is None else [g + [a] for g, a in zip(got, arrays)]
    del pipe
    return [np.concatenate(g) for g in got], on_gpu


def _placement(device: str, **kw) -> dali_graph.Placement:
    return dali_graph.Placement(0 if device == "gpu" else None, **kw)


def compare(model: str, data_dir: str, devices=("gpu", "cpu"), batches: int = 3,
            batch_size: int = 8, image_size: int | None = None, seed: int = 7,
            tgt_len: int = 64, hw_decoder_load: float = dali_graph.HW_DECODER_LOAD
            ) -> list[Comparison]:
    """Every split of ``model``'s DALI pipeline on ``devices[0]`` against ``devices[1]``; on a
    GPU also with float16 images and with ``--dali_cpu``'s placement (CPU decoding); nvJPEG
    gives ``hw_decoder_load`` of the JPEGs to the hardware decoders, as training does."""
    results = []
    with tempfile.TemporaryDirectory() as idx_dir:
        for split, (names, build) in pipelines(model, data_dir, idx_dir, image_size,
                                               batch_size, tgt_len).items():
            bound = IMAGE_BOUNDS.get(model, 0.0) * (TRAIN_IMAGE_FACTOR if split == "train"
                                                    else 1.0)
            reference, _ = run_pipeline(build(_placement(devices[1])), _placement(devices[1]),
                                        batch_size, batches, seed)
            variants = [("", _placement(devices[0], hw_decoder_load=hw_decoder_load))]
            if devices[0] == "gpu" and model != "transformerxl":
                variants += [("-float16", _placement("gpu", float16=True,
                                                     hw_decoder_load=hw_decoder_load)),
                             ("-dali_cpu", _placement("gpu", cpu_decode=True))]
            for suffix, where in variants:
                got, on_gpu = run_pipeline(build(where), where, batch_size, batches, seed)
                results += compare_outputs(split + suffix, names, got, reference, bound)
                if where.gpu:
                    results.append(Comparison(split + suffix, "placement", on_gpu,
                                              "every output on the GPU" if on_gpu else
                                              "an output left the GPU"))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(models.MODELS))
    ap.add_argument("--data_dir", required=True, help="prepare_dataset.py's output")
    ap.add_argument("--devices", default="gpu,cpu",
                    help="the placement compared, then the reference: gpu,cpu (default) or "
                         "cpu,cpu (the comparison run against itself)")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--image_size", type=int, default=None, help="default: the recipe's")
    ap.add_argument("--hw_decoder_load", type=float, default=dali_graph.HW_DECODER_LOAD,
                    help="nvJPEG's share for the GPU's hardware JPEG decoders (training's "
                         "--dali_hw_decoder_load; default %(default)s)")
    ap.add_argument("--json", help="also write the comparisons here")
    args = ap.parse_args(argv)
    if args.batches < 1 or args.batch_size < 1:
        ap.error(f"--batches {args.batches} and --batch_size {args.batch_size}: at least 1 each")
    if not 0.0 <= args.hw_decoder_load <= 1.0:  # NaN too
        ap.error(f"--hw_decoder_load must be in [0, 1], not {args.hw_decoder_load}")
    devices = tuple(args.devices.split(","))
    if len(devices) != 2 or not set(devices) <= {"gpu", "cpu"}:
        ap.error(f"--devices must be two of gpu, cpu: {args.devices}")
    try:
        results = compare(args.model, args.data_dir, devices, args.batches, args.batch_size,
                          args.image_size, hw_decoder_load=args.hw_decoder_load)
    except (OSError, ValueError, RuntimeError) as e:
        why = (str(e).splitlines() or [repr(e)])[0]  # (a !r here reprs the whole expression)
        print(f"dali_compare: error: {why}", file=sys.stderr)
        return 2
    print(f"{args.model}: DALI on {devices[0]} against {devices[1]}, {args.batches} batches "
          f"of {args.batch_size}")
    print("| split | output | result | figures |\n|---|---|---|---|")
    print("\n".join(r.row() for r in results))
    failed = [r for r in results if not r.passed]
    print(f"{len(results) - len(failed)} of {len(results)} comparisons agree")
    if args.json:
        with open(args.json, "w") as f:
            images = [r for r in results if r.output == "images" and r.split == "eval"]
            summary = f"{len(results) - len(failed)} of {len(results)} agree" + (
                f"; eval images {images[0].detail.split(' (')[0]}" if images else "")
            json.dump({"model": args.model, "devices": list(devices), "summary": summary,
                       "comparisons": [dataclasses.asdict(r) for r in results],
                       "passed": not failed}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
