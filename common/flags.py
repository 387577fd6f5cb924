"""Command-line flags shared by every model, named as in NVIDIA's scripts, and the settings a
run uses.

Each parse builds a fresh ``absl.flags.FlagValues`` (common flags, then the model's own), so
three models can be configured side by side in one process. Errors are one line. The flag bag
holds what the command line asked for and is never written to: what a run derives from it (a
default that depends on another flag, a preset, a recipe rule such as SSD320's steps from the
global batch, a value read from the data) is a ``Settings`` on top of it, which the loops read
like the flags and the PARAMETER record lists.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence

from absl import flags

from common.errors import DataError, UsageError

# NVIDIA's older flag names keep working.
ALIASES = {"use_tf_amp": "amp", "use_xla": "xla", "use_dali": "dali"}
MODES = ("train", "train_and_evaluate", "evaluate", "predict", "training_benchmark",
         "inference_benchmark")


def _define_common(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_enum("mode", "train_and_evaluate", MODES, "What to run.", **d)
    flags.DEFINE_integer("batch_size", 32, "Batch size per GPU (per process); the global batch "
                         "is this times the number of processes.", lower_bound=1, **d)
    flags.DEFINE_integer("batch_chunk", 1, "Gradient accumulation: each optimizer step "
                         "averages the gradients of this many consecutive --batch_size batches "
                         "(the global batch is batch_size x processes x batch_chunk).",
                         lower_bound=1, **d)
    flags.DEFINE_integer("num_iter", 1, "How long to train or benchmark, in --iter_unit.",
                         lower_bound=1, **d)
    flags.DEFINE_enum("iter_unit", "epoch", ("epoch", "batch"), "Unit of --num_iter.", **d)
    flags.DEFINE_integer("warmup_steps", 20, "Benchmark steps run before timing starts.",
                         lower_bound=0, **d)
    flags.DEFINE_string("data_dir", None, "Dataset directory; absent: synthetic data.", **d)
    flags.DEFINE_string("data_idx_dir", None, "DALI index files (default: <data_dir>/idx).", **d)
    flags.DEFINE_string("results_dir", "./results", "Logs, summaries and exports go here.", **d)
    flags.DEFINE_string("model_dir", None, "Checkpoints (default: <results_dir>/checkpoints).", **d)
    flags.DEFINE_string("log_filename", "log.json", "DLLogger JSON file inside --results_dir.", **d)
    flags.DEFINE_integer("seed", None, "Random seed (model initialisation, data order).",
                         lower_bound=0, upper_bound=2**32 - 1, **d)
    flags.DEFINE_boolean("dali", False, "Read data with a DALI pipeline instead of tf.data.", **d)
    flags.DEFINE_boolean("dali_cpu", False, "With --dali on a GPU: decode and augment on the CPU "
                         "(batches still reach the GPU from DALI), for GPUs short of memory.",
                         **d)
    flags.DEFINE_float("dali_hw_decoder_load", None, "With --dali on a GPU: the share of the "
                       "JPEGs nvJPEG gives the GPU's hardware JPEG decoders (A100, H100, H200; "
                       "ignored by GPUs without them), the rest decoded on its CUDA cores "
                       "(default: nearly all, common/data/dali_graph.py; DALI's own is 0.65).",
                       lower_bound=0.0, upper_bound=1.0, **d)
    flags.DEFINE_string("finetune_checkpoint", None, "Start training from the weights of this "
                        "checkpoint (a prefix or a directory of this repository's checkpoints, "
                        "imported ones included) with a fresh step counter, optimizer and "
                        "schedule. A --model_dir that holds checkpoints is resumed instead.", **d)
    flags.DEFINE_string("export_dir", None, "Export a SavedModel here after the run.", **d)
    flags.DEFINE_string("profile", None, "START:STOP: a TensorFlow profiler trace of those "
                        "steps in <results_dir>/tensorboard, and the share of time in matmuls and "
                        "convolutions, 16-bit or float32 (and on tensor cores, on a GPU).", **d)
    flags.DEFINE_boolean("export_onnx", False, "With --export_dir: also write model.onnx "
                         "there (float32, tf2onnx), for TensorRT's trtexec or ONNX Runtime.",
                         **d)
    flags.DEFINE_boolean("export_onnx_int8", False, "With --export_dir and --data_dir: also an "
                         "INT8 ONNX beside each ONNX file (model_int8.onnx: explicit Q/DQ "
                         "quantization calibrated on training images, for trtexec --int8).", **d)
    flags.DEFINE_string(
        "export_triton", None, "With --export_dir: also a Triton Inference Server model "
        "repository per kind of server here: DIR/cpu (any tritonserver with the Python "
        "backend), DIR/triton (NVIDIA's Triton container built by docker/Dockerfile.triton), "
        "DIR/tensorflow (the SavedModel, for containers with the TensorFlow backend), and in "
        "DIR.tensorrt the TensorRT models with their build script. The image models' need "
        "model.onnx: implies --export_onnx. Into existing repositories it adds a version of "
        "each model.", **d)
    flags.DEFINE_string("weights_license", None, "The model card's licence for weights "
                        "trained here, as the Hugging Face Hub names licences (apache-2.0, mit, "
                        "cc-by-4.0 ...; another is written as 'other' with its name); without "
                        "it, 'unknown'. Imported or fine-tuned weights keep their source's.",
                        **d)
    flags.DEFINE_boolean("triton_replace", False, "--export_triton into an existing "
                         "repository: replace its models' versions instead of adding one.", **d)
    flags.DEFINE_integer("calibration_images", 512, "--export_onnx_int8: training images the "
                         "activation ranges are calibrated on.", lower_bound=1, **d)
    flags.DEFINE_enum("use_tftrt", None, ("FP32", "FP16"), "inference_benchmark: time the "
                      "model converted by TF-TRT at this precision (TensorFlow with TensorRT "
                      "only: NVIDIA's containers).", **d)
    flags.DEFINE_string("to_predict", None, "predict mode: a file, a directory or a glob.", **d)
    flags.DEFINE_integer("display_every", 10, "Log every N steps.", lower_bound=1, **d)
    flags.DEFINE_integer("save_checkpoint_steps", 0, "Also checkpoint every N steps "
                         "(always at epoch ends, at the end and on a graceful stop).",
                         lower_bound=0, **d)
    flags.DEFINE_integer("eval_every", 0, "train_and_evaluate: also evaluate every N steps "
                         "(always at the end).", lower_bound=0, **d)
    flags.DEFINE_boolean("eval_at_epoch_end", True, "train_and_evaluate: also evaluate at every "
                         "epoch's end (SSD320's default: no, as NVIDIA's recipe evaluates at "
                         "the end; an epoch of COCO is about 460 steps at a global batch of "
                         "256).", **d)
    flags.DEFINE_integer("max_bad_steps", 10, "Stop when this many consecutive steps have "
                         "non-finite gradients (such a step is never applied, in any precision).",
                         lower_bound=1, **d)
    flags.DEFINE_integer("hang_timeout", 600, "Under Horovod: a rank that waits this many "
                         "seconds for a training step while another rank has stopped answering "
                         "(or every rank waits) ends the job with a line naming it "
                         "(common/runtime/watchdog.py); 0: no watch.", lower_bound=0, **d)
    flags.DEFINE_integer("keep_checkpoints", 5, "Keep the last N checkpoints.", lower_bound=1, **d)
    # Precision (common/precision.py decides; None means "not given on the command line").
    flags.DEFINE_boolean("amp", None, "Automatic mixed precision (also "
                         "TF_ENABLE_AUTO_MIXED_PRECISION=1).", **d)
    flags.DEFINE_enum("amp_dtype", "auto", ("auto", "float16", "bfloat16"), "AMP compute type; "
                      "auto: float16 on a GPU, bfloat16 on a CPU.", **d)
    flags.DEFINE_float("static_loss_scale", None, "Fixed loss scale for float16 "
                       "(default: dynamic loss scaling).", **d)
    flags.DEFINE_boolean("tf32", None, "Allow TF32 on Ampere and later GPUs (default on; "
                         "NVIDIA_TF32_OVERRIDE=0 turns it off).", **d)
    flags.DEFINE_boolean("no_tf32", False, "Same as --notf32.", **d)
    flags.DEFINE_boolean("xla", False, "Compile the train and eval steps with XLA.", **d)
    flags.DEFINE_boolean("fp16_allreduce", False, "Compress gradients to float16 for the "
                         "Horovod allreduce.", **d)
    for alias, name in ALIASES.items():
        flags.DEFINE_alias(alias, name, flag_values=fv)


def define_preset(fv: flags.FlagValues, presets: Mapping[str, Mapping], default: str,
                  help_text: str) -> None:
    """``--preset``: a named set of flag values (a model's recipe, its tests' tiny size, a
    learning check's) that become the defaults of the flags it names; a flag given on the
    command line (or taken from a checkpoint) wins over it (``preset_values``)."""
    flags.DEFINE_enum("preset", default, list(presets), help_text, flag_values=fv)


def preset_values(settings: Settings, presets: Mapping[str, Mapping]) -> dict:
    """``--preset``'s values for the flags neither the command line nor a checkpoint set: the
    one place presets are resolved (``common/runner.py`` applies them before a task derives
    anything from the settings)."""
    if not presets or "preset" not in settings._fv:
        return {}
    return {name: value for name, value in presets[settings.preset].items()
            if not settings.given(name)}


def require_positive(fv: flags.FlagValues, *names: str) -> None:
    """A learning rate (or any such flag) of zero or less stops at parsing, with one line."""
    for name in names:
        flags.register_validator(name, lambda v: v is None or v > 0,
                                 message=f"--{name} must be greater than 0", flag_values=fv)


def require_fraction(fv: flags.FlagValues, *names: str) -> None:
    """A momentum or decay rate outside [0, 1) stops at parsing, with one line."""
    for name in names:
        flags.register_validator(name, lambda v: v is None or 0 <= v < 1,
                                 message=f"--{name} must be in [0, 1)", flag_values=fv)


def build(define_model_flags: Callable[[flags.FlagValues], None] | None = None,
          defaults: Mapping | None = None) -> flags.FlagValues:
    fv = flags.FlagValues()
    _define_common(fv)
    if define_model_flags:
        define_model_flags(fv)
    for name, value in (defaults or {}).items():
        fv.set_default(name, value)
    return fv


class Settings:
    """The flags as a run uses them: the command line's values, with what was derived from them
    in place of the defaults. Read like the flags; ``given(name)`` says whether the command
    line set a flag, or a checkpoint did (``adopted``: what a checkpoint's settings record
    fixes, which a preset's or a recipe's default must not replace); ``derived`` is what
    differs from the flags. Read-only."""

    def __init__(self, fv: flags.FlagValues, derived: Mapping | None = None,
                 adopted: Mapping | None = None):
        object.__setattr__(self, "_fv", fv)
        object.__setattr__(self, "derived", dict(derived or {}))
        object.__setattr__(self, "adopted", dict(adopted or {}))

    def __getattr__(self, name):
        derived = object.__getattribute__(self, "derived")
        return derived[name] if name in derived else getattr(self._fv, name)

    def __setattr__(self, name, value):
        raise AttributeError(f"the settings are read-only ({name}): derive a value in the "
                             "task's derive_settings instead")

    def __getitem__(self, name):
        """The flag object (its ``present``, ``default``)."""
        return self._fv[name]

    def given(self, name: str) -> bool:
        return bool(self._fv[name].present) or name in self.adopted

    def with_derived(self, values: Mapping) -> Settings:
        return Settings(self._fv, {**self.derived, **values}, self.adopted)

    def refuses(self, name: str, value) -> str | None:
        """Why ``--name`` could not take ``value`` (its type, its bounds, its choices), as the
        command line would refuse it; None when it could."""
        if name not in self._fv:
            return "no such flag"
        flag = self._fv[name]
        try:
            parsed = flag.parser.parse(_flag_text(value))
        except (ValueError, TypeError, flags.Error) as e:
            return str(e).splitlines()[0] if str(e) else type(e).__name__
        for validator in flag.validators:  # the flag's own checks (a recipe that must parse)
            if getattr(validator, "get_flags_names", lambda: [])() != [name]:
                continue
            try:
                ok = validator.checker(parsed)
            except (flags.ValidationError, ValueError, TypeError) as e:
                return str(e).splitlines()[0] if str(e) else validator.message
            if not ok:
                return validator.message
        return None

    def with_adopted(self, values: Mapping) -> Settings:
        """``values`` taken from a checkpoint: used, and counted as given."""
        return Settings(self._fv, {**self.derived, **values}, {**self.adopted, **values})

    def flag_values_dict(self) -> dict:
        return {**self._fv.flag_values_dict(), **self.derived}

    def get_help(self, **kwargs) -> str:
        return self._fv.get_help(**kwargs)


def parse(fv: flags.FlagValues, argv: Sequence[str], model: str = "the model",
          int8_export: bool = True) -> Settings:
    """Parses ``argv`` (program name first); raises ``UsageError`` with one line on any problem
    (``model`` and whether it has an INT8 export, for that flag's), and for a mode that the
    command line's run would find no input for. ``--help`` (``-h``, ``--helpfull``) prints
    every flag with its default and exits 0."""
    if any(a in ("-h", "--help", "--helpfull") for a in argv[1:]):
        prog = os.path.basename(argv[0]) if argv else "main.py"
        print(f"usage: {prog} [--flag=value ...]\n\n{fv.get_help(include_special_flags=False)}")
        raise SystemExit(0)
    try:
        rest = fv(list(argv))
    except flags.Error as e:
        raise UsageError(str(e).splitlines()[0]) from None
    except UnicodeDecodeError:  # absl reads a --flagfile as text
        args = list(argv)
        given = [a.split("=", 1)[1] if "=" in a else (args[n + 1] if n + 1 < len(args) else "")
                 for n, a in enumerate(args) if a.split("=", 1)[0] in ("--flagfile",
                                                                       "-flagfile")]
        raise UsageError(f"--flagfile {' '.join(given)}: not a text file (one --flag=value a "
                         "line)") from None
    if len(rest) > 1:
        raise UsageError(f"unexpected positional arguments: {' '.join(rest[1:])}")
    # What the run's mode reads (the Python API builds with --mode evaluate and runs no mode).
    if fv.mode == "evaluate" and fv.data_dir is None:
        raise UsageError("--mode evaluate needs --data_dir (accuracy on synthetic data means "
                         "nothing; use --mode inference_benchmark for speed)")
    return _checked(fv, model, int8_export)


def from_values(fv: flags.FlagValues, values: Mapping, model: str = "the model",
                int8_export: bool = True) -> Settings:
    """``values`` by flag name over ``fv``'s defaults, as the command line gives them: each
    parsed by its flag (a Python value, or a list for a list flag) and checked by its own
    validators, then by ``validate``; one ``UsageError`` line for a name no flag has or a
    value a flag refuses (the Python API's settings: ``api.load(path, amp=True)``)."""
    fv.mark_as_parsed()
    checks = Settings(fv)
    for name, value in values.items():
        refused = checks.refuses(name, value)  # as the command line would refuse it
        if refused:
            raise UsageError(f"{name}={value!r}: {refused}")
        fv[name].parse(_flag_text(value))
    try:
        fv.validate_all_flags()
    except flags.Error as e:
        raise UsageError(str(e).splitlines()[0]) from None
    return _checked(fv, model, int8_export)


def _flag_text(value):
    """A value as a flag parses it: a list (or tuple) as the command line writes one, a,b,c."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value


def _checked(fv: flags.FlagValues, model: str, int8_export: bool) -> Settings:
    if fv.export_onnx_int8 and not int8_export:  # before what it would need
        raise UsageError(f"--export_onnx_int8: {model}'s ONNX is not calibrated for INT8 (the "
                         "image models are: ResNet-50, SSD320)")
    return Settings(fv, validate(fv))


def check_export_places(export_dir, export_triton=None, model_dir=None,
                        names=("--export_dir", "--export_triton", "--model_dir")) -> None:
    """An export, its Triton repository and the checkpoints each in a directory of its own,
    none inside another (``main.py``'s flags and ``api.Checkpoint.export`` alike, each naming
    them its way)."""
    export_name, triton_name, ckpt_name = names
    if export_triton and export_dir:
        triton, export = (os.path.realpath(p) for p in (export_triton, export_dir))
        if triton == export:
            raise UsageError(f"{triton_name} needs a directory of its own, not {export_name}")
        if triton.startswith(export + os.sep):  # the repository would copy itself into itself
            raise UsageError(f"{triton_name} {export_triton} is inside {export_name} "
                             f"{export_dir}: give the model repository a directory beside "
                             "the export")
        if export.startswith(triton + os.sep):  # Triton would take the export for a model
            raise UsageError(f"{export_name} {export_dir} is inside {triton_name} "
                             f"{export_triton}: Triton reads every folder there as a model; "
                             "give the export a directory beside the repository")
    if export_dir and model_dir:
        # An export in the checkpoints' directory made that directory an export for
        # api.load (and swapped the checkpoints with it); either inside the other, alike.
        export, ckpt = (os.path.realpath(p) for p in (export_dir, model_dir))
        if export == ckpt or export.startswith(ckpt + os.sep) or ckpt.startswith(export + os.sep):
            raise UsageError(f"{export_name} {export_dir} and the checkpoints' {ckpt_name} "
                             f"{model_dir} need directories of their own, neither inside the "
                             "other")


def validate(f: flags.FlagValues) -> dict:
    """Refuses what cannot work, with one line; returns the defaults that follow from other
    flags (``--no_tf32``, ``--model_dir``, ``--data_idx_dir``)."""
    derived = {}
    if f.no_tf32:
        if f.tf32:
            raise UsageError("--tf32 and --no_tf32 contradict each other")
        derived["tf32"] = False
    if f.data_dir is not None and not os.path.isdir(f.data_dir):
        raise DataError(f"--data_dir {f.data_dir} does not exist or is not a directory")
    if f.fp16_allreduce and f.static_loss_scale is not None:
        raise UsageError("--fp16_allreduce compresses the scaled gradients, which a static loss "
                         "scale can push past float16's range at every step: use dynamic loss "
                         "scaling (drop --static_loss_scale)")
    if f.dali_cpu and not f.dali:
        raise UsageError("--dali_cpu chooses where DALI decodes: it needs --dali")
    if f.dali_hw_decoder_load is not None and not 0.0 <= f.dali_hw_decoder_load <= 1.0:
        raise UsageError(f"--dali_hw_decoder_load is a share of the JPEGs, in [0, 1]: not "
                         f"{f.dali_hw_decoder_load}")  # absl's bounds let NaN through
    if f.dali_hw_decoder_load is not None and not f.dali:
        raise UsageError("--dali_hw_decoder_load shares DALI's JPEG decoding: it needs --dali")
    if f.dali_hw_decoder_load is not None and f.dali_cpu:
        raise UsageError("--dali_hw_decoder_load shares nvJPEG's decoding on the GPU; "
                         "--dali_cpu decodes on the CPU: give one of them")
    if f.dali and f.data_dir is None:
        raise UsageError("--dali needs --data_dir: synthetic data does not go through DALI")
    if f.export_onnx and not f.export_dir:
        raise UsageError("--export_onnx writes model.onnx into --export_dir: give --export_dir")
    if f.export_triton and not f.export_dir:
        raise UsageError("--export_triton makes a model repository of the export: give "
                         "--export_dir")
    model_dir = (f.model_dir or os.path.join(f.results_dir, "checkpoints")
                 if f.results_dir else None)
    check_export_places(f.export_dir, f.export_triton, model_dir)
    if f.export_onnx_int8 and not f.export_dir:
        raise UsageError("--export_onnx_int8 writes model_int8.onnx into --export_dir: give "
                         "--export_dir")
    if f.export_onnx_int8 and f.data_dir is None:
        raise UsageError("--export_onnx_int8 calibrates on training images: give --data_dir "
                         "(ranges from synthetic data would mean nothing)")
    if f.profile and f.mode in ("evaluate", "predict"):
        raise UsageError(f"--profile traces training or benchmark steps; --mode {f.mode} has "
                         "none: profile --mode inference_benchmark instead")
    if f.profile and importlib.util.find_spec("xprof") is None:
        raise UsageError("--profile tabulates the traced ops with xprof, which is not installed: "
                         "pip install 'tf-model-scripts[profile]' (or tensorboard-plugin-profile)")
    if f.finetune_checkpoint and f.mode not in ("train", "train_and_evaluate"):
        raise UsageError(f"--finetune_checkpoint starts a training run from its weights; --mode "
                         f"{f.mode} reads a checkpoint from --model_dir instead")
    if f.finetune_checkpoint and not (os.path.isdir(f.finetune_checkpoint)
                                      or os.path.exists(f.finetune_checkpoint + ".index")):
        raise DataError(f"--finetune_checkpoint {f.finetune_checkpoint} is neither a checkpoint "
                        "prefix (DIR/ckpt-N) nor a directory of checkpoints")
    if f.mode == "predict" and not f.to_predict:
        raise UsageError("--mode predict needs --to_predict (a file, a directory or a glob)")
    if f.mode in ("training_benchmark", "inference_benchmark"):
        if f.iter_unit != "batch":
            raise UsageError(f"--mode {f.mode} counts steps: use --iter_unit batch")
        if f.num_iter <= f.warmup_steps:
            raise UsageError(f"--num_iter ({f.num_iter}) must exceed --warmup_steps "
                             f"({f.warmup_steps}) so that some steps are timed")
    # What a run writes in --results_dir itself cannot be the log's name.
    taken = (".", "..", "tensorboard", "checkpoints", "predictions", "predictions.json")
    if f.log_filename and (os.sep in f.log_filename or f.log_filename in taken
                           or os.path.isdir(os.path.join(f.results_dir, f.log_filename))):
        raise UsageError(f"--log_filename {f.log_filename} must name a file inside --results_dir"
                         ", not a directory or a path")
    if f.model_dir is None:
        derived["model_dir"] = os.path.join(f.results_dir, "checkpoints")
    if f.data_idx_dir is None and f.data_dir is not None:
        derived["data_idx_dir"] = os.path.join(f.data_dir, "idx")
    return derived


def as_dict(f: Settings) -> dict:
    """Every setting and its value, derived ones included (for the PARAMETER record); aliases
    are left out."""
    skip = set(ALIASES) | {"help", "helpfull", "helpshort", "helpxml"}
    return {k: v for k, v in sorted(f.flag_values_dict().items()) if k not in skip}
