"""SSD320 v1.2's flags and recipe defaults, without TensorFlow: ``main.py --help`` reads them
from here (``common/entry.py``) in a fraction of a second; the task imports them."""
from __future__ import annotations

import dataclasses

from absl import flags

from common import flags as common_flags
from common.runtime.log_names import resnet_pattern

ARCH_NAMES = ("resnet50", "resnet_tiny")  # ssd.model.ARCHS: resnet_tiny is for tests and demos
TRUNKS = ("resnet_v1", "resnet_v1.5")  # ssd.model.TRUNKS
# The parts that can compute in float32 under a 16-bit policy (ssd.model.build_ssd's
# float32_parts): the trunk (C3-C5), the FPN (P3-P7), the box and class towers (convolutions,
# batch norms, ReLU6), the heads (the last convolutions and their outputs). The loss and the box
# coding are float32 always (ssd/losses.py).
FLOAT32_PARTS = ("trunk", "fpn", "towers", "heads")
MAX_BOXES = 100  # boxes a record keeps (its largest) and the targets hold
# NVIDIA's DLLogger names (DeepLearningExamples' TF SSD: model_main.py's train_throughput,
# inference benchmark's infer_throughput, eval_avg_latency, eval_90%_latency...); the COCO
# figures under TF Object Detection's names, which NVIDIA's SSD evaluation reports; the rest
# (step records, evaluation throughput) on the ResNet-50 pattern.
_COCO = {"AP": "Precision/mAP", "AP50": "Precision/mAP@.50IOU", "AP75": "Precision/mAP@.75IOU",
         "APs": "Precision/mAP (small)", "APm": "Precision/mAP (medium)",
         "APl": "Precision/mAP (large)", "AR1": "Recall/AR@1", "AR10": "Recall/AR@10",
         "AR100": "Recall/AR@100", "ARs": "Recall/AR@100 (small)",
         "ARm": "Recall/AR@100 (medium)", "ARl": "Recall/AR@100 (large)"}
LOG_NAMES = dataclasses.replace(
    resnet_pattern("images/s", {k: (f"DetectionBoxes_{v}", None) for k, v in _COCO.items()}),
    infer_throughput="infer_throughput", latency_avg="{phase}_avg_latency",
    latency_percentile="{phase}_{p}%_latency")
# NVIDIA's recipe evaluates once, after training; --eval_every adds evaluations.
FLAG_DEFAULTS = {"batch_size": 32, "num_iter": 12500, "iter_unit": "batch",
                 "eval_at_epoch_end": False}
# --preset (common/flags.py): nvidia is the flags' own defaults; shapes is the learning
# check's, the demo's and the INT8 table's run on the generated shapes at 128x128 with the tiny
# trunk (a curve: an evaluation at every epoch's end); tiny is the tests'.
PRESETS = {
    "nvidia": {},
    "shapes": {"arch": "resnet_tiny", "image_size": 128, "batch_size": 16, "lr_init": 0.64,
               "lr_warmup_steps": 100, "display_every": 50, "eval_at_epoch_end": True},
    "tiny": {"arch": "resnet_tiny", "image_size": 128, "batch_size": 4, "display_every": 1,
             "lr_warmup_steps": 2},
}


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    common_flags.define_preset(fv, PRESETS, "nvidia", "Named flag values: nvidia (NVIDIA's "
                               "8-GPU recipe, the defaults), shapes (the learning check's and "
                               "demo's on generated shapes), tiny (the tests').")
    flags.DEFINE_enum("arch", "resnet50", list(ARCH_NAMES), "Backbone; resnet_tiny is for tests.",
                      **d)
    flags.DEFINE_enum("trunk", "resnet_v1", list(TRUNKS), "The ResNet-50 the FPN stands on: "
                      "resnet_v1 is TF-slim's resnet_v1_50 as NVIDIA's SSD320 uses it (TF-slim's "
                      "ImageNet checkpoint initialises it); resnet_v1.5 is this repository's "
                      "(a resnet50v1.5/main.py or import_weights.py checkpoint initialises it).",
                      **d)
    flags.DEFINE_enum("padding", "same", ("same", "symmetric"), "The resnet_v1.5 trunk's "
                      "padding (default: its --backbone_checkpoint's).", **d)
    flags.DEFINE_integer("num_classes", None, "Largest category id (default: from the data's "
                         "label_map.json, else COCO's 90).", lower_bound=1, **d)
    flags.DEFINE_integer("image_size", 320, "Input resolution (square, a multiple of 32).",
                         lower_bound=64, upper_bound=2048, **d)
    flags.DEFINE_float("lr_init", 0.16, "Base learning rate at a global batch of 256 "
                       "(scaled linearly with the global batch).", **d)
    flags.DEFINE_float("lr_warmup_ratio", 0.43332, "Warm-up starts at this fraction of the "
                       "base rate.", lower_bound=0, upper_bound=1, **d)
    flags.DEFINE_integer("lr_warmup_steps", None, "Warm-up steps (default: 1000 x 256 / global "
                         "batch).", lower_bound=0, **d)
    flags.DEFINE_float("momentum", 0.9, "SGD momentum.", **d)
    flags.DEFINE_float("weight_decay", 0.0004, "TF-slim L2 on convolution kernels.",
                       lower_bound=0, **d)
    flags.DEFINE_boolean("freeze_bn", False, "Freeze every batch norm (NVIDIA's config asks for "
                         "this but its code trains them; the default matches the code).", **d)
    flags.DEFINE_string("backbone_checkpoint", None, "Initialise the trunk from an ImageNet "
                        "classifier, as NVIDIA's recipe does: TF-slim's resnet_v1_50 checkpoint "
                        "(e.g. resnet_v1_50.ckpt) for --trunk resnet_v1, a resnet50v1.5 "
                        "checkpoint (a prefix or a --model_dir) for --trunk resnet_v1.5.", **d)
    flags.DEFINE_list("float32_parts", None, "Under AMP, the parts of the network that compute "
                      "in float32: any of trunk, fpn, towers, heads ('' for none). Default: fpn "
                      "under bfloat16 (AMP on a CPU), none under float16 (on a GPU). For "
                      "precision studies (ssd320/scripts/learning_check.py --float32_parts).",
                      **d)
    flags.DEFINE_float("score_threshold", 0.3, "predict mode: draw and list detections above "
                       "this score.", lower_bound=0, upper_bound=1, **d)
    flags.DEFINE_integer("dali_threads", 4, "DALI CPU worker threads per process.",
                         lower_bound=1, **d)
    common_flags.require_positive(fv, "lr_init")
    common_flags.require_fraction(fv, "momentum")
    flags.register_validator(
        "float32_parts", lambda v: v is None or set(v) <= set(FLOAT32_PARTS),
        message=f"--float32_parts takes any of {', '.join(FLOAT32_PARTS)}", flag_values=fv)
    flags.register_validator("image_size", lambda v: v % 32 == 0,
                             message="--image_size must be a multiple of 32", flag_values=fv)
