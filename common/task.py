"""What a model supplies to the shared loops (``common/trainer.py``).

A task owns its model, input pipelines, loss and metrics; the trainer owns everything else:
precision, distribution, the loops, logging, checkpoints and benchmarks.
"""
from __future__ import annotations

import abc
import dataclasses
import importlib
import itertools
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from common.checkpoint.settings import CheckpointSpec
from common.data import input_errors
from common.data.records import RecordData
from common.errors import UsageError
from common.flags import Settings
from common.precision import Precision
from common.runtime import devices
from common.runtime.distributed import Distributed, rank_seed
from common.runtime.dllogger import Logger
from common.runtime.log_names import LogNames, resnet_pattern


@dataclasses.dataclass
class RunContext:
    flags: Settings  # the flags as the run uses them (common/flags.py), derived ones included
    dist: Distributed
    precision: Precision
    logger: Logger
    capabilities: devices.Capabilities  # the device and dtype's consequences, decided once

    @property
    def global_batch_size(self) -> int:
        return self.flags.batch_size * self.dist.size * self.flags.batch_chunk


def model_config(flag_defaults: Mapping[str, Any] | None = None,
                 log_names: LogNames | None = None) -> types.SimpleNamespace:
    """A model's configuration where it has no config module of its own (a test's task)."""
    return types.SimpleNamespace(FLAG_DEFAULTS=dict(flag_defaults or {}), PRESETS={},
                                 LOG_NAMES=log_names or resnet_pattern("items/s", {}),
                                 define_flags=lambda fv: None)


class Task(abc.ABC):
    name = "task"
    item_unit = "items"  # what throughput counts: images, tokens, ...
    headline_metric: str | None = None  # the evaluation metric results quote (charts plot it)
    # The model's config module, TensorFlow-free (``<package>/config.py``; ``main.py --help``
    # reads it alone): ``define_flags`` (its own flags), ``FLAG_DEFAULTS`` (its defaults for the
    # common ones), ``PRESETS`` (--preset's named values, resolved by
    # common.flags.preset_values before derive_settings) and ``LOG_NAMES`` (NVIDIA's names of
    # its figures, common/runtime/log_names.py).
    config = model_config()

    @classmethod
    def derive_settings(cls, settings, world: int) -> dict:
        """The recipe's rules, once, in Python: settings this model derives from the command
        line, the number of processes (``world``) and its data, by flag name (SSD320's steps
        from the global batch, Transformer-XL's preset and rows per process). They replace the
        flags' values for the whole run (``ctx.flags``) and in the PARAMETER record; the
        launchers pass flags only. Called before the run's context exists."""
        return {}

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.flags = ctx.flags

    def effective_settings(self) -> dict:
        """Settings this task derived from its data or configuration, by flag name, with the
        values the run uses (the vocabulary size read from vocab.txt, say); they replace the
        flags' own values in the log's PARAMETER record. Called after ``build_model``."""
        return {}

    # --- what a checkpoint is (common/checkpoint/settings.py) ----------------------------
    checkpoint = CheckpointSpec()

    def checkpoint_facts(self) -> dict[str, tuple[Any, str]]:
        """Settings that come from the data and shape the model (a vocabulary's hash), each
        with where it comes from ("vocab.txt in --data_dir D"): recorded beside every
        checkpoint, and a run whose data differ from a checkpoint's is refused, naming both."""
        return {}

    def build_model_like(self, recorded: Mapping) -> keras.Model:
        """The model a checkpoint recorded with these settings holds (its own number of
        classes, say), to restore before a fine-tuning run copies its weights; the default is
        this run's model."""
        return self.build_model()

    # --- model and optimisation ---------------------------------------------------------
    @abc.abstractmethod
    def build_model(self) -> keras.Model:
        """A built model (variables created), under the precision policy already set."""

    @abc.abstractmethod
    def build_optimizer(self, steps_per_epoch: int, total_steps: int) -> keras.optimizers.Optimizer:
        """The optimizer with its schedule; loss scaling is added by the trainer."""

    # Every step function takes a state and returns the next one. A stateless model ignores it
    # (it is None) and hands it back; a stateful one (Transformer-XL's memory) builds its first
    # state from the model in ``initial_state``. The trainer keeps one state per micro-batch of
    # a training step (each owns its rows of the data, see ``train_dataset``), one for an
    # evaluation pass and one for the inference benchmark, and passes it from step to step.
    # Training states restart from ``initial_state`` at every epoch's first step and when a run
    # resumes (checkpoints hold weights and optimizer, not the state).
    def initial_state(self, model: keras.Model, purpose: str):
        """None (stateless), or a nest of tensors: the state a "train", "eval" or "infer"
        stream of ``model`` starts from."""
        return None

    # Whether ``prepare_train_batch`` runs inside the forward pass's function, which --xla
    # compiles (SSD320's anchor matching fused with the rest); False where it needs an op XLA
    # has no kernel for (mixup's gamma draws): then it runs in the step before that function.
    prepare_compiles = True

    def prepare_train_batch(self, batch):
        """A training micro-batch as ``train_loss`` takes it, made inside the step on the
        device the batch is on (the GPU, for DALI's): one-hot targets, mixup, box targets.
        Nothing is chained after a GPU-placed DALI dataset (``common/data/dali.py``), so this is
        where such work goes (compiled with the forward pass unless ``prepare_compiles`` is
        False); the default hands the batch on."""
        return batch

    @abc.abstractmethod
    def train_loss(self, model: keras.Model, batch, state=None) -> tuple[tf.Tensor, Any]:
        """(the float32 scalar to minimise for one micro-batch, the state the same rows' next
        micro-batch starts from). Regularisation is not included: the trainer adds
        ``regularization``."""

    def regularization(self, model: keras.Model) -> tf.Tensor | None:
        """A float32 scalar the trainer adds to every micro-batch's loss (weight decay as an L2
        term), or None."""
        return None

    # Evaluation comes in one of two forms. Metrics that are sums (accuracy, perplexity):
    # ``eval_metrics`` and ``eval_update``; the trainer adds the ranks' sums up. Metrics that
    # need every prediction at once (COCO AP): ``eval_outputs`` returns per-example tensors, the
    # trainer gathers them from every rank in order, and rank 0 calls ``summarize`` once on the
    # whole split.
    gathers_eval_outputs = False
    # (axis, flag): every evaluation batch is padded along ``axis`` to the flag's value (the
    # last one is shorter), so that the evaluation step has one shape: a batch's rows.
    eval_padding = (0, "batch_size")

    # Under AMP, whether the runs that only infer (evaluate, predict, inference_benchmark) may run
    # ``precision.compute_dtype_copy`` of the model: its 16-bit layers' weights stored in the
    # compute dtype, instead of float32 weights cast at every step. Only for a model whose
    # outputs that leaves unchanged (a test shows it): every weight of a 16-bit layer read
    # rounded to the compute dtype, and no batch normalisation (its statistics are read in
    # float32).
    infers_in_compute_dtype = False

    def eval_outputs(self, model: keras.Model, batch) -> Mapping[str, tf.Tensor]:
        """Per-example tensors (first axis = batch) for ``summarize`` (inside a tf.function)."""
        raise NotImplementedError

    def summarize(self, outputs: Mapping[str, np.ndarray]) -> dict:
        """The evaluation results from every example's outputs, concatenated over ranks."""
        raise NotImplementedError

    def eval_metrics(self) -> Sequence[keras.metrics.Metric]:
        """Metrics whose variables are sums (totals and counts), so ranks can add them up."""
        return []

    def eval_update(self, model: keras.Model, batch, metrics: Sequence[keras.metrics.Metric],
                    state=None, valid=None):
        """Updates ``metrics`` with one evaluation batch (inside a ``tf.function``), weighing
        only its ``valid`` entries (bool along ``eval_padding``'s axis: the last batch's
        padding is not); returns the next batch's state."""
        raise NotImplementedError(f"{self.name} has no evaluation")

    # --- data ---------------------------------------------------------------------------
    # The model's sharded TFRecords, where its data are those (``record_data``, made in its
    # ``__init__``): the datasets, the epoch's size and the bad-record locator below read them.
    records: RecordData | None = None

    def steps_per_epoch(self) -> int:
        """Optimizer steps in one training epoch at the run's global batch
        (``ctx.global_batch_size``: --batch_size x --batch_chunk x processes); the default
        counts the records."""
        if self.records is None:
            raise NotImplementedError(f"{self.name} has no records to count")
        return max(1, self.records.train_examples() // self.ctx.global_batch_size)

    def train_dataset(self) -> tf.data.Dataset:
        """This rank's training data, repeating: micro-batches of ``--batch_size`` rows in the
        order the trainer consumes them (the default: the records', or synthetic batches). Each
        optimizer step takes ``--batch_chunk`` consecutive elements (step t's micro-batches
        0..k-1, then step t + 1's) and averages their gradients. For a stateful task,
        micro-batch c of step t + 1 continues the rows of micro-batch c of step t: the trainer
        hands it the state that one returned."""
        if self.records is None:
            raise NotImplementedError(f"{self.name} has no training data")
        return self.records.train_dataset()

    def train_dataset_at(self, step: int) -> tf.data.Dataset:
        """The training data of a run that resumes after ``step`` optimizer steps. Shuffled data
        need not continue where they stopped (the default); ordered data (a language model's
        streams) start at the micro-batch the step would have read next."""
        return self.train_dataset()

    def eval_dataset(self) -> tf.data.Dataset:
        """This rank's shard of the evaluation data, one pass (the default: the validation
        records')."""
        if self.records is None:
            raise NotImplementedError(f"{self.name} has no evaluation data")
        return self.records.dataset("validation", False)

    def check_eval_inputs(self, first_batch) -> None:
        """Raises a one-line error when something the evaluation reads besides
        ``eval_dataset``'s batches is missing or unusable (an annotations file, or one that
        does not describe ``first_batch``, this rank's first evaluation batch or None); called
        before training starts in ``train_and_evaluate``."""
        return None

    def input_checks(self) -> Sequence[input_errors.DeviceRangeCheck]:
        """The checks this task makes of its batches inside the compiled step (labels in range,
        on the device DALI leaves them on); the trainer reads them at its sync points."""
        return ()

    def items_in(self, batch) -> int:
        """How many ``item_unit`` one batch holds (for throughput)."""
        return int(tf.nest.flatten(batch)[0].shape[0])

    # --- export and inference -------------------------------------------------------------
    # The model's exports object (common/export/module.py): what its exports hold, and what
    # inference is (predict, the inference benchmark).
    exports_class: type = None
    @property
    def empty_eval_hint(self) -> str:
        """What to check when the evaluation data gave no batch, for the error line (the
        records' preparing script, where the data are records)."""
        if self.records is not None:
            return self.records.empty_eval_hint
        return "the evaluation split holds no examples"

    # The split evaluation reads, as a model card names it (Hugging Face's split names).
    eval_split = "validation"


class Repeated:
    """Synthetic data as NVIDIA's benchmarks use it: one batch, made once on the device this
    process computes on, handed out at every step (no host-to-device copy in the timed loop)."""

    def __init__(self, batch):
        self.batch = batch

    def __iter__(self):
        return itertools.repeat(self.batch)


def l2_regularization(weight_decay: float, weights) -> tf.Tensor | None:
    """``weight_decay`` x the sum of ``tf.nn.l2_loss`` over ``weights`` (float32), or None when
    ``weight_decay`` is 0: the weight decay of ResNet's and SSD's SGD recipes."""
    if not weight_decay:
        return None
    return weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(w, tf.float32)) for w in weights])


def record_data(ctx: RunContext, *, prepare_script: str, synthetic_epoch: int,
                dali_pipeline: str, tfdata_pipeline: types.ModuleType,
                synthetic: Callable[[], Any], dali_args: Mapping | None = None,
                tfdata_args: Mapping | None = None) -> RecordData:
    """The run's ``RecordData`` of a model whose data are sharded TFRecords: its pipeline
    modules' ``dataset(files, ...)`` called with what every record model passes them (this
    rank's share, the batch, the image size, DALI's placement and threads), the model's own
    arguments added (``dali_args``, ``tfdata_args``); the DALI module (``dali_pipeline``, by
    name) imported only when used, the check a record must pass its tf.data module's
    ``record_check``. ``--mode train_and_evaluate`` without --data_dir stops here."""
    f, dist = ctx.flags, ctx.dist
    if f.mode == "train_and_evaluate" and f.data_dir is None:
        raise UsageError("--mode train_and_evaluate evaluates on --data_dir's validation "
                         f"split: give --data_dir (prepared by {prepare_script}), or --mode "
                         "train on synthetic data")
    shared = {"batch_size": f.batch_size, "image_size": f.image_size, "rank": dist.rank,
              "world": dist.size}

    def dali_read(files, training):
        from common.data import dali
        module = importlib.import_module(dali_pipeline)
        return module.dataset(files, idx_dir=f.data_idx_dir, training=training,
                              where=dali.placement(ctx.capabilities, f), seed=f.seed,
                              num_threads=f.dali_threads, **shared, **(dali_args or {}))

    def tfdata_read(files, training, whole=False):
        share = {"rank": 0, "world": 1} if whole else {}
        return tfdata_pipeline.dataset(files, training=training,
                                       seed=rank_seed(f.seed, dist.rank),
                                       **{**shared, **share}, **(tfdata_args or {}))
    return RecordData(prepare_script=prepare_script, synthetic_epoch=synthetic_epoch,
                      check=tfdata_pipeline.record_check(f.num_classes), dali=dali_read,
                      tfdata=tfdata_read, synthetic=synthetic, data_dir=f.data_dir,
                      index_dir=f.data_idx_dir, use_dali=bool(f.dali), dist=dist)


def locate_bad_record(task: Task, split: str) -> str | None:
    """After the ``split`` ("train" or "eval") pipeline failed: "<file>, record <n>: <why>"
    for the first bad record of a task with records (``RecordData.locate_bad_record``), else
    None."""
    return task.records.locate_bad_record(split) if task.records is not None else None


def check_inputs(task: Task, split: str) -> None:
    """At a sync point: what the compiled steps found wrong in the batches
    (``Task.input_checks``: a label out of range), as one line naming the record where it
    can."""
    for check in task.input_checks():
        check.raise_if_bad(lambda: locate_bad_record(task, split))
