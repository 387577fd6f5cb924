"""A batch of validation images as the exported network takes them, for Polygraphy's
comparison of the TensorRT engines with ONNX Runtime (scripts/gpu_smoke.sh's ``tensorrt``
stage).

    python -m benchtools.tensorrt_inputs --data_dir /data/imagenet \
        --triton_dir /results/triton --out inputs.npz [--images 16]
    TENSORRT_INPUTS=inputs.npz polygraphy run /results/export/model.onnx --trt --fp16 \
        --onnxrt --data-loader-script benchtools/tensorrt_inputs.py:load_data

The images are the first ``--images`` of the validation records (their encoded bytes), prepared
by the repository's own ``<name>_preprocess`` model (the export's evaluation preprocessing), so
the engines are compared on what the served ensemble hands them. ``load_data`` is Polygraphy's
data loader: it needs numpy only (Polygraphy imports it in its own process).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np

PROG = "tensorrt_inputs"


def load_data():
    """Polygraphy's data loader: the batch ``TENSORRT_INPUTS`` names, as one feed dict."""
    with np.load(os.environ["TENSORRT_INPUTS"]) as found:
        yield {k: found[k] for k in found.files}


def preprocess_model(triton_dir: str) -> str:
    """The newest version of the ``<name>_preprocess`` SavedModel of the repositories
    ``--export_triton`` wrote (``triton_dir``/triton, the one the engines are served in)."""
    found = sorted(glob.glob(os.path.join(triton_dir, "triton", "*_preprocess", "[0-9]*",
                                          "model.savedmodel")),
                   key=lambda p: int(os.path.basename(os.path.dirname(p))))
    if not found:
        raise ValueError(f"{triton_dir} has no <name>_preprocess model: give the "
                         "--export_triton repository of an image model")
    return found[-1]


def write(data_dir: str, triton_dir: str, out: str, images: int,
          request_dir: str | None = None) -> str:
    import tensorflow as tf

    from common.data import tfrecord_index
    files = tfrecord_index.shard_files(data_dir, "validation", "prepare them first")
    feature = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
    encoded = [tf.io.parse_single_example(r, feature)["image/encoded"]
               for r in tf.data.TFRecordDataset(files).take(images)]
    fn = tf.saved_model.load(preprocess_model(triton_dir)).signatures["serving_default"]
    prepared = fn(images=tf.stack(encoded))
    if not bool(tf.reduce_all(prepared["valid"])):
        raise ValueError(f"a validation image in {data_dir} could not be decoded")
    np.savez(out, images=prepared["images"].numpy())
    said = f"wrote {out}: images {tuple(prepared['images'].shape)} float32"
    if request_dir:  # perf_analyzer's --input-data: a file named after the input
        os.makedirs(request_dir, exist_ok=True)
        with open(os.path.join(request_dir, "images"), "wb") as fh:
            fh.write(encoded[0].numpy())
        said += f"; {request_dir}/images: the first image's bytes"
    return said


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", required=True, help="the model's prepared records")
    p.add_argument("--triton_dir", required=True, help="the --export_triton repository")
    p.add_argument("--out", required=True, help="the .npz to write")
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--request_dir", help="also the first image's bytes here, as perf_analyzer's "
                   "--input-data reads an encoded-image request")
    args = p.parse_args(argv)
    try:
        print(write(args.data_dir, args.triton_dir, args.out, args.images, args.request_dir))
    except (ValueError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
