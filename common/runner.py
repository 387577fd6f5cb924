"""Entry point shared by every ``main.py``: flags -> Horovod -> precision -> logs -> mode."""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import glob
import os
import random
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import keras
import numpy as np
import tensorflow as tf

from common import files, flags, precision
from common.checkpoint import settings as checkpoint_settings
from common.core import inference
from common.errors import DataError, TrainingError, UsageError, say
from common.export import require_tools
from common.runtime import devices, distributed, graceful_stop
from common.runtime.dllogger import Logger
from common.task import RunContext, Task
from common.tools import profiling
from common.trainer import Trainer


def _predict_paths(pattern: str) -> list[str]:
    if os.path.isdir(pattern):
        paths = sorted(os.path.join(pattern, p) for p in os.listdir(pattern))
    else:
        paths = sorted(glob.glob(pattern))
    paths = [p for p in paths if os.path.isfile(p)]
    if not paths:
        raise DataError(f"--to_predict {pattern} matches no file")
    return paths


def run_settings(trainer: Trainer) -> dict:
    """What this run derived from its flags, data and configuration, by name, for the
    PARAMETER record: the global batch, the epoch and run lengths in steps, the schedule's
    peak learning rate and warm-up (after scaling), and the task's own (``Task.
    effective_settings``), which replace the flags' values of the same names."""
    lr = trainer.inner_optimizer.get_config()["learning_rate"]  # a schedule: its config
    schedule = lr["config"] if isinstance(lr, dict) else {"peak": float(lr)}
    out = {"global_batch_size": trainer.ctx.global_batch_size,
           "steps_per_epoch": trainer.steps_per_epoch, "total_steps": trainer.total_steps(),
           "lr_peak": schedule.get("peak")}
    if "warmup_steps" in schedule:
        out["lr_warmup_steps"] = schedule["warmup_steps"]
    return {**out, **trainer.task.effective_settings()}


@dataclasses.dataclass(frozen=True)
class Settled:
    """A run's settings, settled before anything is built: the flags as the run uses them (the
    checkpoint's recorded settings, the preset's and the task's derived ones in), the processes
    and what was taken from a checkpoint ((settings, whose), or None)."""
    task_cls: type[Task]
    flags: flags.Settings
    dist: distributed.Distributed
    adopted: tuple | None


def settle(task_cls: type[Task], values: Mapping[str, Any] | None = None,
           argv: Sequence[str] | None = None) -> Settled:
    """The settings of a run of ``task_cls``: the command line's (``argv``, program name first:
    main.py's) or ``values`` by flag name over the flags' defaults (the Python API's:
    ``amp=True``), then a checkpoint's recorded settings where neither gives one, the preset's
    values and the task's derived ones; the tools they need are checked. What cannot work is
    one line (``UsageError``, ``DataError``). Nothing is written."""
    fv = _parse(task_cls, argv, values)
    dist = distributed.init()
    fv, adopted = _settle(task_cls, fv, dist)
    return Settled(task_cls, fv, dist, adopted)


def build(settled: Settled, messages: TextIO | None = None) -> Trainer:
    """The run of ``settled``: its precision (set for the process), its logs (the run's in
    --results_dir; with ``messages``, its lines written there alone, no file), the task and
    the trainer with its model, and the start's lines."""
    task_cls, fv, dist = settled.task_cls, settled.flags, settled.dist
    prec = precision.resolve(
        amp=fv.amp, amp_dtype=fv.amp_dtype, static_loss_scale=fv.static_loss_scale, tf32=fv.tf32,
        xla=fv.xla, has_gpu=dist.devices.gpu)
    precision.apply(prec)
    logger = (_logger(task_cls, fv, dist) if messages is None
              else Logger(enabled=dist.is_chief, stream=messages))
    if fv.seed is not None:
        keras.utils.set_random_seed(fv.seed)  # same on every rank: rank 0's weights win anyway
    ctx = RunContext(flags=fv, dist=dist, precision=prec, logger=logger,
                     capabilities=devices.decide(dist.devices, prec.compute_dtype))
    try:
        trainer = Trainer(task_cls(ctx), ctx)
    except BaseException:
        logger.close()
        raise
    _say_settings(trainer, settled.adopted)
    return trainer


def setup(task_cls: type[Task], argv: Sequence[str]) -> Trainer:
    """Flags, Horovod, precision, logs and the model of a command line: everything before the
    mode runs (``settle``, then ``build``)."""
    return build(settle(task_cls, argv=argv))


def _parse(task_cls: type[Task], argv: Sequence[str] | None, values: Mapping | None):
    """The command line's flags (or ``values``'), and what they need checked before anything
    starts: the tools an export or a benchmark runs (TF-TRT, tf2onnx, Model Optimizer), a
    profiled range that would leave no timed step. Each stops here with one line."""
    exports = task_cls.exports_class
    int8 = exports is not None and exports.export.int8
    fv = flags.build(task_cls.config.define_flags, task_cls.config.FLAG_DEFAULTS)
    fv = (flags.parse(fv, argv, task_cls.name, int8) if values is None
          else flags.from_values(fv, values, task_cls.name, int8))
    inference.require(fv)
    if exports is not None:
        require_tools(exports.export, fv)
    profiled = profiling.parse_range(fv.profile)  # a malformed range stops here, with one line
    if (profiled and fv.mode in ("training_benchmark", "inference_benchmark")
            and profiled[0] <= fv.warmup_steps + 1 and profiled[1] >= fv.num_iter):
        raise UsageError(f"--profile {fv.profile} covers every timed step "
                         f"({fv.warmup_steps + 1}..{fv.num_iter}); profiled steps are not timed: "
                         "profile a part of them, or raise --num_iter")
    return fv


def _settle(task_cls: type[Task], fv, dist):
    """(the flags with the checkpoint's recorded settings where the command line gave none,
    the preset's values and the task's derived ones; (adopted settings, whose) or None): read
    by rank 0, the same on every rank."""
    adopted = dist.broadcast_object(dist.on_chief(lambda: checkpoint_settings.adopted(task_cls, fv),
                                                  "reading the checkpoint's settings"))
    fv = fv.with_adopted(adopted[0]) if adopted and adopted[0] else fv
    fv = fv.with_derived(flags.preset_values(fv, task_cls.config.PRESETS))
    return fv.with_derived(task_cls.derive_settings(fv, dist.size)), adopted


def _logger(task_cls: type[Task], fv, dist) -> Logger:
    """The run's logs in --results_dir (rank 0's): a file there (or where its TensorBoard
    directory goes), a read-only or a full disk stops the run here."""
    tensorboard_dir = os.path.join(fv.results_dir, "tensorboard", fv.mode)

    def check_results_dir():
        files.check_output_dir(fv.results_dir, "--results_dir")
        files.check_output_dir(tensorboard_dir, "--results_dir's TensorBoard directory")
    dist.on_chief(check_results_dir, "checking --results_dir")
    distributed.check_shared(dist, fv.results_dir, "--results_dir")
    logger = Logger(
        enabled=dist.is_chief,
        json_path=os.path.join(fv.results_dir, fv.log_filename) if fv.log_filename else None,
        tensorboard_dir=tensorboard_dir)
    for name, unit, fmt in task_cls.config.LOG_NAMES.units():  # DLLogger's units, NVIDIA's names
        logger.metadata(name, unit=unit, fmt=fmt)
    return logger


def _say_settings(trainer: Trainer, adopted) -> None:
    """The log's parameters and the start's lines, once everything derived from the data and
    the configuration is known: the log holds the values this run uses (classes from
    label_map.json, the vocabulary's size, the scaled learning rate), not only what the command
    line asked for."""
    ctx, task_cls = trainer.ctx, type(trainer.task)
    fv, dist, prec, logger = ctx.flags, ctx.dist, ctx.precision, ctx.logger
    logger.parameters({**flags.as_dict(fv), "world_size": dist.size,
                       **run_settings(trainer), **prec.describe(),
                       "model": task_cls.name, "headline_metric":
                           task_cls.config.LOG_NAMES.metric(task_cls.headline_metric)
                           if task_cls.headline_metric else None,
                       "machine": devices.describe(dist.devices), "tensorflow": tf.__version__})
    logger.print(
        f"precision: policy {prec.policy} (amp: {prec.sources['amp']}), loss scale "
        f"{prec.loss_scale or 'none'}, tf32 {'on' if prec.tf32 else 'off'} "
        f"({prec.sources['tf32']}), xla {'on' if prec.xla else 'off'}"
        + (f", {precision.XLA_ENV}={prec.xla_env_flags}" if prec.xla_env_flags else "")
        + (f", {precision.CUDNN_BN_ENV}=1" if prec.cudnn_bn_persistent else ""))
    # TensorFlow's own start-up lines about CUDA are not shown (common/runtime/quiet_start.py):
    # this line says what the process computes on.
    logger.print(f"device: {devices.describe(dist.devices)}")
    if adopted and adopted[0]:
        logger.print(f"from {adopted[1]}: " + ", ".join(
            f"--{k} {','.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in sorted(adopted[0].items())))
    chunks = f" x {fv.batch_chunk} accumulated" if fv.batch_chunk > 1 else ""
    logger.print(f"processes: {dist.size}, batch {fv.batch_size}{chunks} per process, "
                 f"global batch {ctx.global_batch_size}")


@contextlib.contextmanager
def process_state_restored():
    """What ``setup`` changes for the whole process, put back as it was after the block: the
    Keras dtype policy, TF32, Grappler's AMP rewrite and the Python and numpy random states.
    (TensorFlow's global seed has no getter; every run with ``--seed`` sets it anew.)"""
    policy = keras.mixed_precision.dtype_policy()
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    grappler = tf.config.optimizer.get_experimental_options()
    python_rng, numpy_rng = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        tf.config.optimizer.set_experimental_options(
            {"auto_mixed_precision": grappler.get("auto_mixed_precision", False)})
        random.setstate(python_rng)
        np.random.set_state(numpy_rng)


def run(task_cls: type[Task], argv: Sequence[str]) -> dict:
    """Runs one job and returns its summary (also logged). Raises the errors of common.errors.
    The process is left as it was found (``process_state_restored``), so several runs in one
    process give what the same ``main.py`` command lines give."""
    with process_state_restored():
        return _run(task_cls, argv)


def _run(task_cls: type[Task], argv: Sequence[str]) -> dict:
    graceful_stop.set_phase("while starting (nothing written)", reset=True)
    trainer = setup(task_cls, argv)
    fv, logger = trainer.flags, trainer.log
    try:
        summary = {"mode": fv.mode}
        graceful_stop.set_phase(f"during --mode {fv.mode} (checkpoints are as the last save "
                                "left them)")
        if fv.mode in ("train", "train_and_evaluate"):
            summary.update(trainer.train(trainer.total_steps(),
                                         evaluate=fv.mode == "train_and_evaluate"))
        elif fv.mode == "evaluate":
            trainer.restore(required=True)
            summary.update(trainer.evaluate())
        elif fv.mode == "predict":
            summary.update(trainer.predict(_predict_paths(fv.to_predict)))
        elif fv.mode == "training_benchmark":
            summary.update(trainer.benchmark_training())
        elif fv.mode == "inference_benchmark":
            summary.update(trainer.benchmark_inference())
        if fv.export_dir:
            graceful_stop.set_phase(f"while exporting to {fv.export_dir} (not written; an "
                                    "earlier export there is as it was)")
            trainer.export(fv.export_dir)
        if trainer.dist.devices.gpu:  # what the recipe's batch costs (scripts/gpu_smoke.sh)
            peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
            summary["gpu_memory_peak_mib"] = round(peak / 2**20)
        summary.update(precision=trainer.ctx.precision.policy, world_size=trainer.dist.size)
        if fv.mode in inference.INFERENCE_MODES:
            summary["inference_weights"] = trainer.inference_model.weights_dtype
        summary.update(_where(fv))
        logger.summary(summary)
        return summary
    finally:
        trainer.profiler.close()
        logger.close()


def _where(fv) -> dict:
    """Where the run's files are, the summary's last lines: its log, the checkpoints it wrote
    or read, its predictions and exports."""
    out = {"log": os.path.abspath(os.path.join(fv.results_dir, fv.log_filename))}
    if fv.mode in ("train", "train_and_evaluate", "evaluate", "predict"):
        out["checkpoints"] = os.path.abspath(fv.model_dir)
    if fv.mode == "predict":
        out["predictions_file"] = os.path.abspath(os.path.join(fv.results_dir,
                                                               "predictions.json"))
    if fv.export_dir:
        out["export"] = os.path.abspath(fv.export_dir)
    if fv.export_triton:
        out["triton_repository"] = os.path.abspath(fv.export_triton)
    return out


def main(task_cls: type[Task], argv: Sequence[str] | None = None) -> int:
    """``sys.exit(main(MyTask))``: one line on stderr for the errors a user can fix."""
    argv = list(sys.argv if argv is None else argv)
    prog = os.path.basename(argv[0]) if argv else "main.py"
    try:
        run(task_cls, argv)
        return 0
    except UsageError as e:
        say(f"{prog}: error: {e}")
        return 2
    except graceful_stop.Interrupted as e:
        # Outside the training loop (which stops at a step, with a checkpoint): nothing is
        # half-written (exports are staged); say what was cut short.
        say(f"{prog}: {e.signame}: stopped {graceful_stop.phase()}")
        return 0
    except (DataError, TrainingError) as e:
        message = str(e)
        # The traceback holds the input pipeline's iterator; freeing it stops tf.data's worker
        # threads, so that their own complaints (libjpeg's, say) come before this line, not after.
        e.__traceback__ = None
        del e
        gc.collect()
        say(f"{prog}: error{_rank_label()}: {message}")
        return 1
    except tf.errors.OpError as e:
        if not distributed.shut_down(e):
            raise
        # Gloo's Horovod shuts down on every rank when one is lost, and the next collective
        # raises here: the launcher's lines name the rank.
        say(f"{prog}: error{_rank_label()}: Horovod shut down (another rank failed or was "
            f"lost: {distributed.launched_by()}'s lines name it); ending without a stop "
            "checkpoint (the last checkpoint written is whole)")
        return 1


def _rank_label() -> str:
    rank = distributed.launched_rank() if distributed.launched_world_size() else None
    return f" (rank {rank})" if rank else ""
