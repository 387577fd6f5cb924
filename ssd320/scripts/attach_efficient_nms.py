#!/usr/bin/env python
"""TensorRT's EfficientNMS plugin attached to SSD320's ONNX graph before NMS.

    python ssd320/scripts/attach_efficient_nms.py EXPORT/model_before_nms.onnx \
        EXPORT/model_efficient_nms.onnx
    trtexec --onnx=EXPORT/model_efficient_nms.onnx --fp16 --saveEngine=ssd320.plan ...

``--export_onnx`` writes ``model_before_nms.onnx`` (and ``--export_onnx_int8`` its INT8 form,
``model_before_nms_int8.onnx``): every anchor's decoded box ``decoded_boxes`` (N, A, 4),
normalised (ymin, xmin, ymax, xmax) and clipped, and its class scores ``class_scores`` (N, A, C)
after the sigmoid, background excluded. This script adds one ``EfficientNMS_TRT`` node on them
with SSD320's post-processing (``ssd/postprocess.py``: IoU 0.6, score above 1e-8, 100
detections per image; per-class NMS) in standard mode (boxes already decoded: ``box_coding``
0, corners, which covers (y, x) order; ``score_activation`` 0: the scores are sigmoids), and
makes its four outputs the graph's: ``num_detections`` (N, 1), ``detection_boxes``
(N, 100, 4), ``detection_scores`` (N, 100) and ``detection_classes`` (N, 100) category ids,
float32 as the SavedModel's (TF Object Detection API's types: the plugin's int32 count and class
index k cast, the index plus one, the background column not being in the scores).

The node is in the ``trt.plugins`` domain: ONNX's checker accepts an op of a custom domain
(an unknown op in the default domain fails it), and TensorRT's ONNX parser imports any op it
has no importer for from its plugin registry by the op's name, whatever the domain. The
graph then runs in TensorRT only (ONNX Runtime has no such op); ``model.onnx`` keeps ONNX's own
NonMaxSuppression for ONNX Runtime.

A score threshold under about 0.01 makes the plugin sort far more candidates (its README's
performance notes): 1e-8 is what the COCO evaluation uses; a deployment that reads only
confident detections passes ``--score_threshold 0.05`` or so.

Bad input ends with one line (exit 2 for the command line, 1 for the files): a file that is not
ONNX or is cut short, an output whose folder is missing or that is a folder, the input given as
the output, settings the plugin cannot take. The output is written whole or not at all (beside
it, then renamed): a full disk leaves no truncated graph.
"""
import argparse
import os
import runpy
import sys

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

from common.errors import DataError, reported  # noqa: E402
from common.runtime import quiet_start  # noqa: E402

with quiet_start.filtered_stderr():  # TensorFlow's start-up lines (ssd.postprocess imports it)
    from ssd import postprocess
    from ssd.efficient_nms import OUTPUTS, attach

def check(args) -> str | None:
    """Why the command line cannot work, or None."""
    if not os.path.isfile(args.src):
        return f"{args.src} does not exist" if not os.path.exists(args.src) else \
            f"{args.src} is not a file"
    if os.path.isdir(args.dst):
        return f"{args.dst} is a folder: give the output file's path"
    folder = os.path.dirname(os.path.abspath(args.dst))
    if not os.path.isdir(folder):
        return f"the folder of {args.dst} does not exist"
    if os.path.exists(args.dst) and os.path.samefile(args.src, args.dst):
        return f"{args.dst} is the input: write the graph with the plugin to another file"
    if args.max_detections < 1:
        return f"--max_detections {args.max_detections}: at least 1"
    if not 0 < args.iou_threshold <= 1:
        return f"--iou_threshold {args.iou_threshold}: an IoU in (0, 1]"
    if not 0 <= args.score_threshold < 1:
        return f"--score_threshold {args.score_threshold}: a score in [0, 1)"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="model_before_nms.onnx (or model_before_nms_int8.onnx)")
    p.add_argument("dst", help="where the graph with EfficientNMS_TRT goes")
    p.add_argument("--score_threshold", type=float, default=postprocess.SCORE_THRESHOLD)
    p.add_argument("--iou_threshold", type=float, default=postprocess.IOU_THRESHOLD)
    p.add_argument("--max_detections", type=int, default=postprocess.MAX_TOTAL)
    args = p.parse_args(argv)
    return reported("attach_efficient_nms.py", lambda: _attach(args),
                    {ValueError: 2, DataError: 1})


def _attach(args) -> int:
    problem = check(args)
    if problem:
        raise ValueError(problem)
    attrs = attach(args.src, args.dst, args.score_threshold, args.iou_threshold,
                   args.max_detections)
    print(f"wrote {args.dst}: EfficientNMS_TRT ({', '.join(f'{k}={v}' for k, v in attrs.items())})"
          f" -> {', '.join(OUTPUTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
