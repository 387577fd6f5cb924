"""SSD320 v1.2 on COCO: the model, data, loss and COCO evaluation that the shared loops run.

Recipe defaults are NVIDIA's 8-GPU ones (``ssd320_full_8gpus.config``): batch 32 per GPU,
momentum 0.9, base learning rate 0.16 at a global batch of 256 scaled linearly with the global
batch, linear warm-up from 0.43332 x base over 1000 steps then cosine decay to 0 at 12,500 steps
(warm-up steps scale inversely with the global batch, as NVIDIA's 1- and 4-GPU configs do), L2
0.0004 as TF-slim applies it (0.0004 x sum(w^2) / 2 on every convolution kernel).
"""
from __future__ import annotations

import os

import keras
import tensorflow as tf

from common.checkpoint import settings as checkpoint_settings
from common.checkpoint import start, store
from common.checkpoint.settings import CheckpointSpec
from common.core import schedules
from common.data.input_errors import DeviceRangeCheck
from common.errors import DataError, UsageError
from common.task import Repeated, Task, l2_regularization, record_data
from ssd import anchors as anchor_gen
from ssd import coco_eval, coco_json, config, losses, postprocess, targets, tfdata_pipeline
from ssd.exports import SSDExports
from ssd.model import ARCHS, build_ssd, decayed_kernels

COCO_TRAIN_IMAGES = 118_287  # the nominal epoch of synthetic data
REFERENCE_BATCH = 256  # NVIDIA's 8 x 32: the batch the learning rate and warm-up are given for
REFERENCE_STEPS = 12_500  # NVIDIA's run at that batch: 3.2 M training images


def _label_map(data_dir):
    """The data's label_map.json, or None (synthetic data, or data prepared without one)."""
    path = os.path.join(data_dir or "", "label_map.json")
    if not data_dir or not os.path.exists(path):
        return None
    return coco_json.label_map(path)


class SSDTask(Task):
    name = "ssd320"
    exports_class = SSDExports
    item_unit = "images"
    headline_metric = "AP50"
    config = config
    gathers_eval_outputs = True

    # What a checkpoint is (common/checkpoint/settings.py).
    checkpoint = CheckpointSpec(flags=("arch", "num_classes", "image_size", "trunk", "padding"),
                                finetune=("arch", "trunk", "padding"),
                                fresh_heads=("class_head",), assets=("label_map.json",))

    @classmethod
    def derive_settings(cls, settings, world):
        """``num_classes`` from the data's label_map.json (COCO's 90 without one), and, unless
        --num_iter is given, NVIDIA's 3.2 M training images as steps of this run's global batch
        (12,500 at 8 x 32; 100,000 on 1 GPU and 25,000 on 4, as its 1- and 4-GPU configs); the
        v1.5 trunk's padding from its --backbone_checkpoint's settings."""
        out = {}
        if settings.backbone_checkpoint and start.finetunes(settings):
            raise UsageError("--backbone_checkpoint and --finetune_checkpoint both give the "
                             "trunk's weights: fine-tuning takes the whole detector's")
        if settings.backbone_checkpoint and settings.trunk == "resnet_v1.5":
            found = checkpoint_settings.read(settings.backbone_checkpoint)
            padding = (found or {}).get("settings", {}).get("padding")
            if padding and settings.given("padding") and padding != settings.padding:
                raise UsageError(f"--padding {settings.padding} contradicts --backbone_checkpoint "
                                 f"{settings.backbone_checkpoint}, written with --padding "
                                 f"{padding}: drop the flag")
            if padding and not settings.given("padding"):
                out["padding"] = padding
        label_map = _label_map(settings.data_dir)
        if settings.num_classes is None:
            out["num_classes"] = label_map["num_classes"] if label_map else 90
        elif label_map and settings.num_classes < label_map["num_classes"]:
            raise UsageError(f"--num_classes {settings.num_classes} is below the largest "
                             f"category id {label_map['num_classes']} in label_map.json")
        if not settings.given("num_iter") and settings.iter_unit == "batch":
            global_batch = settings.batch_size * settings.batch_chunk * world
            out["num_iter"] = max(1, REFERENCE_STEPS * REFERENCE_BATCH // global_batch)
        return out

    def __init__(self, ctx):
        super().__init__(ctx)
        f = self.flags
        if f["float32_parts"].present and ctx.precision.compute_dtype == "float32":
            raise UsageError("--float32_parts chooses what AMP keeps in float32; without --amp "
                             "(or TF_ENABLE_AUTO_MIXED_PRECISION=1) the whole network is float32")
        self.label_map = _label_map(f.data_dir)
        self.anchors = anchor_gen.generate(f.image_size)  # (A, 4) normalised
        self.records = record_data(
            ctx, prepare_script="ssd320/prepare_dataset.py", synthetic_epoch=COCO_TRAIN_IMAGES,
            dali_pipeline="ssd.dali_pipeline", tfdata_pipeline=tfdata_pipeline,
            synthetic=self._synthetic,
            tfdata_args={"anchors": self.anchors, "num_classes": f.num_classes})
        # Class ids of batches DALI leaves on the device, checked there (the tf.data pipeline
        # checks its own as it parses them).
        self.class_check = DeviceRangeCheck("class", 1, f.num_classes)
        # Category names for predict: the data's, else those kept beside the checkpoint.
        # The data's label map, else the checkpoint's: what predict names and exports hold.
        self.known_label_map = self.label_map or _label_map(f.model_dir)
        self.names = {c["id"]: c["name"]
                      for c in (self.known_label_map or {}).get("categories", [])}
        self._gt = None

    def _ground_truth_path(self) -> str:
        path = os.path.join(self.flags.data_dir, "validation_annotations.json")
        if not os.path.exists(path):
            raise DataError(f"{path} is missing: prepare the data with ssd320/prepare_dataset.py")
        return path

    def _ground_truth(self):
        """The validation annotations, checked once (``coco_json.instances``), as a COCO."""
        if self._gt is None:
            self._gt = coco_eval.ground_truth(self._ground_truth_path())
        return self._gt

    # --- model and optimisation ---------------------------------------------------------
    def build_model(self):
        f = self.flags
        model = self._build(f.num_classes)
        if f.backbone_checkpoint:
            from ssd.backbone import load_trunk
            self.ctx.logger.print(load_trunk(model, f.backbone_checkpoint, ARCHS[f.arch].resnet,
                                             f.trunk, f.padding))
        elif (f.mode in ("train", "train_and_evaluate") and not start.finetunes(f)
              and not store.on_disk(f.model_dir)):
            self.ctx.logger.print("note: no --backbone_checkpoint: the trunk starts from random "
                                  "weights (NVIDIA's recipe starts from TF-slim's ImageNet "
                                  "resnet_v1_50: ssd320/README.md, Quick start)")
        return model

    def _build(self, num_classes):
        f = self.flags
        return build_ssd(f.arch, num_classes, f.image_size, f.freeze_bn,
                         float32_parts=self.float32_parts(), trunk=f.trunk, padding=f.padding)

    def float32_parts(self) -> tuple:
        """--float32_parts, or by default the FPN under bfloat16
        (``devices.Capabilities.float32_fpn``)."""
        if self.flags.float32_parts is not None:
            return tuple(self.flags.float32_parts)
        return ("fpn",) if self.ctx.capabilities.float32_fpn else ()

    def build_model_like(self, recorded):
        return self._build(recorded.get("num_classes", self.flags.num_classes))

    def build_optimizer(self, steps_per_epoch, total_steps):
        f, batch = self.flags, self.ctx.global_batch_size
        peak = f.lr_init * batch / REFERENCE_BATCH
        warmup = (f.lr_warmup_steps if f.lr_warmup_steps is not None
                  else round(1000 * REFERENCE_BATCH / batch))
        schedule = schedules.cosine(peak, min(warmup, total_steps), total_steps,
                                    warmup_start=f.lr_warmup_ratio * peak)
        return keras.optimizers.SGD(learning_rate=schedule, momentum=f.momentum)

    def prepare_train_batch(self, batch):
        """Per-anchor targets: the tf.data pipeline's batches carry them already; DALI's carry
        the padded boxes, encoded here for the whole batch by ``targets.encode_targets``, the
        function the tf.data pipeline applies to each image."""
        if "cls" in batch:
            return batch
        count = tf.cast(batch["count"], tf.int64)  # int64 on a GPU: int32 is host-side
        real = tf.range(config.MAX_BOXES, dtype=tf.int64) < count[:, None]  # (N, 100)
        classes = self.class_check(batch["classes"], valid=real)
        boxes = tf.gather(batch["boxes_ltrb"], [1, 0, 3, 2], axis=-1)  # ymin, xmin, ymax, xmax
        cls, box = targets.encode_targets(boxes, classes, count, tf.constant(self.anchors))
        return {"images": batch["images"], "cls": cls, "box": box}

    def input_checks(self):
        return [self.class_check]

    def train_loss(self, model, batch, state=None):
        out = model(batch["images"], training=True)
        return losses.detection_loss(out["cls_logits"], out["box_codes"], batch["cls"],
                                     batch["box"])[0], state

    def regularization(self, model):
        return l2_regularization(self.flags.weight_decay, decayed_kernels(model))

    def detect(self, model, images, on_device: bool = False):
        """The detections (``postprocess.detect``): the exports' NMS kernel, or with
        ``on_device`` the evaluation's NMS, which a GPU runs itself."""
        out = model(images, training=False)
        return postprocess.detect(out["cls_logits"], out["box_codes"], tf.constant(self.anchors),
                                  on_device=on_device)

    def eval_outputs(self, model, batch):
        return {**self.detect(model, batch["images"], on_device=True),
                "image_id": batch["image_id"], "height": batch["height"],
                "width": batch["width"]}

    def summarize(self, outputs):
        return coco_eval.evaluate(self._ground_truth(), coco_eval.to_coco(outputs),
                                  outputs["image_id"], self._ground_truth_path())

    def check_eval_inputs(self, first_batch):
        """validation_annotations.json exists, is COCO instances JSON, and lists the images of
        this rank's first evaluation batch (not another dataset's annotations)."""
        gt = self._ground_truth()
        if first_batch is not None:
            coco_eval.require_listed(gt, first_batch["image_id"].numpy(),
                                     self._ground_truth_path())

    # --- data ---------------------------------------------------------------------------
    def _synthetic(self):
        f, a = self.flags, len(self.anchors)
        batch = {"images": tf.random.normal((f.batch_size, f.image_size, f.image_size, 3)),
                 "cls": tf.cast(tf.where(tf.random.uniform((f.batch_size, a)) < 0.01,
                                         tf.random.uniform((f.batch_size, a), 1,
                                                           f.num_classes + 1, tf.int32), 0),
                                tf.int64),
                 "box": tf.random.normal((f.batch_size, a, 4)),
                 "image_id": tf.range(f.batch_size, dtype=tf.int64),
                 "height": tf.fill([f.batch_size], tf.constant(f.image_size, tf.int64)),
                 "width": tf.fill([f.batch_size], tf.constant(f.image_size, tf.int64))}
        return Repeated(batch)

    def items_in(self, batch):
        return int(batch["images"].shape[0])
