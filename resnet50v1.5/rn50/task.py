"""ResNet-50 v1.5 on ImageNet: the model, data, loss and metrics that the shared loops run.

Recipe defaults are NVIDIA's published ones: SGD with momentum 0.875, learning rate 0.256 per
256 images scaled linearly with the global batch, linear warm-up then cosine decay, label
smoothing 0.1, weight decay 1/32768 on convolution and dense kernels only (not on batch-norm
parameters or biases), 90 epochs.
"""
from __future__ import annotations

import os

import keras
import tensorflow as tf

from common.checkpoint.settings import CheckpointSpec
from common.core import schedules
from common.data.input_errors import DeviceRangeCheck
from common.errors import UsageError
from common.task import Repeated, Task, l2_regularization, record_data
from rn50 import config, eval_preprocessing, tfdata_pipeline
from rn50.exports import ResNetExports
from rn50.model import build_resnet, decayed_kernels

IMAGENET_TRAIN_IMAGES = 1_281_167  # the nominal epoch of synthetic data
IMAGENET_CLASSES = 1000
LABELS = "labels.txt"  # the class names, one a line, in label order (prepare_dataset.py)


def read_labels(directory: str | None) -> list[str] | None:
    """The class names of ``directory``'s labels.txt (a dataset's, or a checkpoint
    directory's), or None where there is none."""
    path = os.path.join(directory or "", LABELS)
    if not directory or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip()]


def eval_recipe(text: str | None, size: int) -> eval_preprocessing.EvalPreprocessing:
    """``--eval_preprocessing`` at the run's ``--image_size`` (the flag's own check had no
    size: a crop left out is this one); one line where the crop does not fit."""
    try:
        return eval_preprocessing.parse(text, size)
    except ValueError as e:
        raise UsageError(f"--eval_preprocessing {text} at --image_size {size}: {e}") from None


class ResNetTask(Task):
    name = "resnet50v1.5"
    item_unit = "images"
    headline_metric = "top1"
    config = config
    exports_class = ResNetExports

    # What a checkpoint is (common/checkpoint/settings.py): padding changes what the same
    # weights compute, so it is recorded with the shapes' settings.
    checkpoint = CheckpointSpec(flags=("arch", "num_classes", "image_size", "padding"),
                                finetune=("arch", "padding"), fresh_heads=("logits",),
                                assets=(LABELS,), preferred=("eval_preprocessing",))

    @classmethod
    def derive_settings(cls, settings, world):
        """``num_classes``: labels.txt's count in --data_dir, else the checkpoint's (when it is
        read, ``settings.given``), else ImageNet's 1000; a count that contradicts labels.txt
        stops here."""
        names = read_labels(settings.data_dir)
        if names is None:
            return {} if settings.num_classes else {"num_classes": IMAGENET_CLASSES}
        if not settings.given("num_classes"):  # a preset's count is for synthetic data
            return {"num_classes": len(names)}
        if settings.num_classes != len(names):
            whose = ("--num_classes" if settings["num_classes"].present
                     else "the checkpoint's number of classes")
            raise UsageError(f"{os.path.join(settings.data_dir, LABELS)} lists {len(names)} "
                             f"classes but {whose} is {settings.num_classes}")
        return {}

    def __init__(self, ctx):
        super().__init__(ctx)
        f = self.flags
        if f.data_format == "NCHW" and not ctx.capabilities.gpu:
            raise UsageError("--data_format NCHW needs a GPU (TensorFlow's CPU kernels are NHWC)")
        # The data's class names, else those kept beside the checkpoint (predict needs no data).
        self.class_names = read_labels(f.data_dir) or read_labels(f.model_dir)
        if self.class_names and len(self.class_names) != f.num_classes:
            self.class_names = None  # another model's names: numbers are shown instead
        # Labels are checked where the batch is (DALI leaves it on the GPU): 1-based, as the
        # records hold them and the tf.data pipeline's own check names them.
        self.label_check = DeviceRangeCheck("label", 1, f.num_classes, shift=1)
        self.prepare_compiles = not f.mixup  # XLA has no kernel for mixup's gamma draws
        # How evaluation prepares an image (--eval_preprocessing, or the checkpoint's record of
        # it), parsed once at the run's image size and handed to the pipelines, predict and
        # the exports: a crop that does not fit is refused now, before any checkpoint.
        self.eval_prep = eval_recipe(f.eval_preprocessing, f.image_size)
        crop = {"min_area": f.crop_area_min, "prep": self.eval_prep}
        self.records = record_data(
            ctx, prepare_script="resnet50v1.5/prepare_dataset.py",
            synthetic_epoch=IMAGENET_TRAIN_IMAGES, dali_pipeline="rn50.dali_pipeline",
            tfdata_pipeline=tfdata_pipeline, synthetic=self._synthetic, dali_args=crop,
            tfdata_args={**crop, "num_classes": f.num_classes})

    # --- model and optimisation ---------------------------------------------------------
    def build_model(self):
        f = self.flags
        return build_resnet(f.arch, f.num_classes, f.image_size, f.data_format,
                            f.zero_init_residual, f.padding)

    def build_model_like(self, recorded):
        f = self.flags
        return build_resnet(f.arch, recorded.get("num_classes", f.num_classes), f.image_size,
                            f.data_format, padding=f.padding)

    def build_optimizer(self, steps_per_epoch, total_steps):
        f = self.flags
        peak = f.lr_init * self.ctx.global_batch_size / 256  # the linear scaling rule
        warmup = int(f.lr_warmup_epochs * steps_per_epoch)
        # NVIDIA's warm-up reaches the peak at its last step: (step + 1) / warmup_steps.
        schedule = (schedules.cosine(peak, warmup, total_steps, offset=1.0)
                    if f.lr_schedule == "cosine"
                    else schedules.steps(peak, warmup, total_steps, offset=1.0))
        return keras.optimizers.SGD(learning_rate=schedule, momentum=f.momentum)

    def prepare_train_batch(self, batch):
        """(images, one-hot targets, smoothed by the loss); with --mixup, each batch blended with
        itself reversed."""
        images, labels = batch  # labels: (N,) int32, 0-based
        targets = tf.one_hot(self.label_check(labels), self.flags.num_classes)
        alpha = self.flags.mixup
        if alpha > 0:
            a, b = tf.random.gamma([], alpha), tf.random.gamma([], alpha)
            lam = a / (a + b)  # ~ Beta(alpha, alpha)
            images = lam * tf.cast(images, lam.dtype) + (1 - lam) * tf.cast(
                tf.reverse(images, [0]), lam.dtype)
            targets = lam * targets + (1 - lam) * tf.reverse(targets, [0])
        return images, targets

    def train_loss(self, model, batch, state=None):
        images, targets = batch  # targets: (N, classes) float32, from prepare_train_batch
        logits = model(images, training=True)  # (N, classes) float32 under any policy
        return tf.reduce_mean(keras.losses.categorical_crossentropy(
            targets, logits, from_logits=True, label_smoothing=self.flags.label_smoothing)), state

    def input_checks(self):
        return [self.label_check]

    def regularization(self, model):
        return l2_regularization(self.flags.weight_decay, decayed_kernels(model))

    def eval_metrics(self):
        # top-1 by TensorFlow's argmax: Keras' compares the logits' bits as int32 (for -0.0),
        # which a GPU does on its host (common/tools/gpu_placement.py)
        return [keras.metrics.MeanMetricWrapper(_top1, name="top1"),
                keras.metrics.SparseTopKCategoricalAccuracy(k=5, name="top5")]

    def eval_update(self, model, batch, metrics, state=None, valid=None):
        images, labels = batch
        labels = self.label_check(labels, valid=valid)
        logits = model(images, training=False)
        weights = None if valid is None else tf.cast(valid, tf.float32)
        for m in metrics:
            m.update_state(labels, logits, sample_weight=weights)
        return state

    # --- data ---------------------------------------------------------------------------
    def _synthetic(self):
        f = self.flags
        images = tf.random.normal((f.batch_size, f.image_size, f.image_size, 3), seed=f.seed)
        labels = tf.random.uniform((f.batch_size,), 0, f.num_classes, tf.int32, seed=f.seed)
        return Repeated((images, labels))


def _top1(labels, logits):
    """1.0 where the highest logit is the label's (the first of equal ones), else 0.0."""
    return tf.cast(tf.equal(tf.argmax(logits, axis=-1), tf.cast(labels, tf.int64)), tf.float32)
