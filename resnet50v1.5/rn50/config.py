"""ResNet-50 v1.5's flags and recipe defaults, without TensorFlow: ``main.py --help`` reads
them from here (``common/entry.py``) in a fraction of a second; the task imports them."""
from __future__ import annotations

from absl import flags

from common import flags as common_flags
from common.runtime.log_names import resnet_pattern
from rn50 import eval_preprocessing

ARCH_NAMES = ("resnet50", "resnet_tiny")  # rn50.model.ARCHS: resnet_tiny is for tests
# NVIDIA's recipe: 90 epochs at 256 images per GPU.
FLAG_DEFAULTS = {"batch_size": 256, "num_iter": 90, "iter_unit": "epoch"}
# NVIDIA's DLLogger names (DeepLearningExamples' TF ResNet-50 main.py, runner.py and
# training_hooks.py): train_throughput, eval_throughput, eval_latency_avg/p90/p95/p99,
# top1_accuracy, top5_accuracy (fractions), and per step total_loss, learning_rate, imgs_per_sec.
LOG_NAMES = resnet_pattern("images/s", {"top1": ("top1_accuracy", None),
                                        "top5": ("top5_accuracy", None)})
def eval_resize(size: int) -> int | None:
    """The shorter side NVIDIA's evaluation resizes an image to before its central ``size``
    crop."""
    return eval_preprocessing.nvidia(size).resize_for(size)


def parse_eval_preprocessing(text: str | None) -> eval_preprocessing.EvalPreprocessing:
    """``--eval_preprocessing`` checked alone, before the run knows its image size:
    ``ValueError`` naming what is wrong. The run's own object is the task's ``eval_prep``, at
    its image size, where a crop left out is checked against the resize."""
    return eval_preprocessing.parse(text, size=None)


# --preset (common/flags.py): nvidia is the flags' own defaults; digits is `make demo`'s, the
# learning check's and the INT8 table's run on scikit-learn's digits at 32x32 (small,
# low-resolution images: crops keep half of each, the last batch norm of a block starts at
# zero); tiny is the tests' (the classes: labels.txt's where there are data).
PRESETS = {
    "nvidia": {},
    "digits": {"arch": "resnet50", "image_size": 32, "batch_size": 32, "num_iter": 3,
               "iter_unit": "epoch", "lr_warmup_epochs": 1.0, "zero_init_residual": True,
               "crop_area_min": 0.5},
    "tiny": {"arch": "resnet_tiny", "num_classes": 10, "image_size": 32, "batch_size": 8,
             "lr_warmup_epochs": 0.0, "display_every": 1},
}


def _valid_recipe(value) -> bool:
    try:
        parse_eval_preprocessing(value)
    except ValueError as e:
        raise flags.ValidationError(f"--eval_preprocessing {value}: {e}") from None
    return True


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    common_flags.define_preset(fv, PRESETS, "nvidia", "Named flag values: nvidia (NVIDIA's "
                               "recipe, the defaults), digits (the demo's and learning check's "
                               "run on handwritten digits), tiny (the tests').")
    flags.DEFINE_enum("arch", "resnet50", list(ARCH_NAMES), "Network; resnet_tiny is for tests.",
                      **d)
    flags.DEFINE_integer("num_classes", None, "Classes (default: as many as labels.txt in "
                         "--data_dir lists, else the checkpoint's, else ImageNet's 1000).",
                         lower_bound=2, **d)
    flags.DEFINE_integer("image_size", 224, "Input resolution (square).", lower_bound=32,
                         upper_bound=2048, **d)
    flags.DEFINE_enum("padding", "same", ("same", "symmetric"), "How strided convolutions and "
                      "the stem's max-pool pad: TensorFlow's same (NVIDIA's), or symmetric as "
                      "PyTorch's (torchvision's and timm's weights; import_weights.py records "
                      "it in the checkpoint).", **d)
    flags.DEFINE_string("eval_preprocessing", None, "How evaluation, predict and the exports "
                        "prepare an image: nvidia (the shorter side to size / 0.875, the central "
                        "crop, NVIDIA's mean and std) or a recipe, "
                        "resize:R,crop:C,interpolation:I,antialias:A,mean:a/b/c,std:a/b/c "
                        "(rn50/eval_preprocessing.py). Default: the checkpoint's "
                        "(import_weights.py records the source's own), else nvidia.", **d)
    flags.register_validator("eval_preprocessing", _valid_recipe,
                             "--eval_preprocessing: nvidia or a recipe "
                             "(rn50/eval_preprocessing.py)", flag_values=fv)
    flags.DEFINE_enum("data_format", "NHWC", ("NHWC", "NCHW"), "Layout inside the model; NCHW "
                      "needs a GPU.", **d)
    flags.DEFINE_float("lr_init", 0.256, "Peak learning rate per 256 images of global batch.", **d)
    flags.DEFINE_float("lr_warmup_epochs", 8, "Linear learning-rate warm-up.", lower_bound=0, **d)
    flags.DEFINE_enum("lr_schedule", "cosine", ("cosine", "step"), "After warm-up: cosine to 0, "
                      "or x0.1 at 1/3, 2/3 and 8/9 of training.", **d)
    flags.DEFINE_float("momentum", 0.875, "SGD momentum.", **d)
    flags.DEFINE_float("weight_decay", 3.0517578125e-05, "L2 on convolution and dense kernels.",
                       lower_bound=0, **d)
    flags.DEFINE_float("label_smoothing", 0.1, "Label smoothing.", lower_bound=0, upper_bound=1,
                       **d)
    flags.DEFINE_float("mixup", 0.0, "Mixup alpha (0: off; NVIDIA's 250-epoch recipe: 0.2).",
                       lower_bound=0, **d)
    flags.DEFINE_boolean("zero_init_residual", False, "Zero-initialise the last batch-norm gamma "
                         "of each bottleneck.", **d)
    flags.DEFINE_float("crop_area_min", 0.08, "Smallest fraction of the image a training crop "
                       "keeps (raise it for small, low-resolution images).", lower_bound=0.01,
                       upper_bound=1.0, **d)
    flags.DEFINE_integer("dali_threads", 4, "DALI CPU worker threads per process.", lower_bound=1,
                         **d)
    common_flags.require_positive(fv, "lr_init")
    common_flags.require_fraction(fv, "momentum")
