"""Transformer-XL's configuration: its flags (NVIDIA's names, base values) and named presets.

``--preset base`` (the default) is NVIDIA's base model on WikiText-103; ``tiny`` is the model
every test trains (seconds on a CPU); ``small`` is the one the learning check trains on
Shakespeare's plays. A preset sets the defaults of the flags it names; a flag given on the
command line wins over it, and the log's PARAMETER record holds the values the run used.
TensorFlow is not imported here (the model's config class is imported where a model is
configured): ``main.py --help`` reads the flags from this module alone (``common/entry.py``).
"""
from __future__ import annotations

import dataclasses

from absl import flags

from common import flags as common_flags
from common.errors import UsageError
from common.runtime.log_names import LogNames

WT103_VOCAB = 267_735
WT103_CUTOFFS = (19997, 39997, 199997)  # NVIDIA's adaptive softmax clusters on WikiText-103
# NVIDIA's base: 40,000 steps, an evaluation every 5,000 (the global batch of 256 rows is
# TransformerXLTask.derive_settings')
FLAG_DEFAULTS = {"batch_size": 256, "num_iter": 40000, "iter_unit": "batch", "eval_every": 5000}
WT103_TRAIN_TOKENS = 103_227_021  # the nominal epoch of synthetic data
# NVIDIA's DLLogger names (DeepLearningExamples' TF Transformer-XL main.py and exp_utils.py):
# per step lr, train_loss, train_perplexity, train_throughput; evaluation eval_loss, eval_ppl,
# eval_avg_throughput, eval_avg_latency, eval_90%_latency... (its inference benchmark is an
# evaluation). ppl_token_weighted (every token weighted alike) has no NVIDIA counterpart.
LOG_NAMES = LogNames(
    unit="tokens/s", loss="train_loss", lr="lr", perplexity="train_perplexity",
    step_throughput="train_throughput", train_throughput="train_throughput",
    eval_throughput="eval_avg_throughput", infer_throughput="eval_avg_throughput",
    latency_avg="{phase}_avg_latency", latency_percentile="{phase}_{p}%_latency",
    metrics={"ppl": ("eval_ppl", None), "loss": ("eval_loss", None)})


@dataclasses.dataclass(frozen=True)
class TXLConfig:
    vocab_size: int
    n_layer: int = 16
    d_model: int = 512
    n_head: int = 8
    d_head: int = 64
    d_inner: int = 2048
    cutoffs: tuple = WT103_CUTOFFS
    dropout: float = 0.1
    dropatt: float = 0.0
    mem_len: int = 192
    clamp_len: int = -1
    same_length: bool = False
    init_std: float = 0.02
    pad_multiple: int = 1  # 8 under AMP on a GPU: softmax sizes padded for tensor cores
    static_shapes: bool = False  # --xla: tail clusters scored at fixed row counts


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    common_flags.define_preset(fv, PRESETS, "base", "Named configuration whose values become "
                               "the defaults of the flags below (base: NVIDIA's; tiny: the "
                               "tests'; small: the learning check's).")
    # Model (NVIDIA's names and base values).
    flags.DEFINE_integer("n_layer", 16, "Layers.", lower_bound=1, **d)
    flags.DEFINE_integer("d_model", 512, "Model width (and embedding size).", lower_bound=2, **d)
    flags.DEFINE_integer("n_head", 8, "Attention heads.", lower_bound=1, **d)
    flags.DEFINE_integer("d_head", 64, "Width of each head.", lower_bound=1, **d)
    flags.DEFINE_integer("d_inner", 2048, "Feed-forward inner width.", lower_bound=1, **d)
    flags.DEFINE_integer("div_val", 1, "Adaptive embedding divisor (only 1, NVIDIA's base: "
                         "one embedding tied to the softmax, no projections).", **d)
    flags.DEFINE_list("cutoffs", [str(c) for c in WT103_CUTOFFS], "Adaptive softmax cluster "
                      "boundaries (those at or above the vocabulary size are dropped).", **d)
    flags.DEFINE_float("dropout", 0.1, "Dropout.", lower_bound=0, upper_bound=0.99, **d)
    flags.DEFINE_float("dropatt", 0.0, "Dropout on attention probabilities.", lower_bound=0,
                       upper_bound=0.99, **d)
    flags.DEFINE_float("init_std", 0.02, "Weights are initialised from N(0, init_std).", **d)
    flags.DEFINE_integer("tgt_len", 192, "Tokens per training segment.", lower_bound=1, **d)
    flags.DEFINE_integer("mem_len", 192, "Memory length in training.", lower_bound=0, **d)
    flags.DEFINE_integer("clamp_len", -1, "Clamp relative distances above this (-1: never).", **d)
    flags.DEFINE_boolean("same_length", False, "Every query sees the same number of keys.", **d)
    flags.DEFINE_integer("vocab_size", WT103_VOCAB, "Vocabulary size of synthetic data (with "
                         "--data_dir it is read from vocab.txt).", lower_bound=2, **d)
    # Optimisation.
    flags.DEFINE_float("lr", 0.01, "Peak learning rate (NVIDIA's --learning_rate).", **d)
    flags.DEFINE_integer("lr_warmup_steps", 1000, "Linear learning-rate warm-up steps "
                         "(NVIDIA's --warmup_steps; ours counts benchmark warm-up).",
                         lower_bound=0, **d)
    flags.DEFINE_float("min_lr_ratio", 0.1, "The cosine ends at this fraction of --lr.",
                       lower_bound=0, upper_bound=1, **d)
    flags.DEFINE_float("clip", 0.25, "Clip gradients to this global norm (after the "
                       "allreduce); 0: no clipping.", lower_bound=0, **d)
    flags.DEFINE_float("weight_decay", 0.01, "LAMB weight decay (on every variable).",
                       lower_bound=0, **d)
    # Evaluation (NVIDIA's protocol).
    flags.DEFINE_enum("eval_split", None, ("valid", "test"), "Split to evaluate (default: valid "
                      "in train_and_evaluate, test in evaluate).", **d)
    flags.DEFINE_integer("eval_batch_size", 16, "Evaluation streams (all processes together).",
                         lower_bound=1, **d)
    flags.DEFINE_integer("eval_tgt_len", 64, "Tokens per evaluation segment.", lower_bound=1, **d)
    flags.DEFINE_integer("eval_mem_len", 640, "Memory length in evaluation.", lower_bound=0, **d)
    flags.DEFINE_integer("eval_clamp_len", 400, "clamp_len in evaluation.", **d)
    flags.DEFINE_boolean("eval_same_length", True, "same_length in evaluation.", **d)
    flags.DEFINE_enum("export_memory", "eval", ("eval", "train"), "The memory an export (and "
                      "its Triton sequence model) keeps and reads: eval, the evaluation "
                      "protocol's (--eval_mem_len, --eval_clamp_len, --eval_same_length: "
                      "NVIDIA's 640, 400 and True at base); train, the training's (--mem_len, "
                      "--clamp_len, --same_length).", **d)
    # Prediction.
    flags.DEFINE_integer("gen_len", 50, "predict: words to generate after each prompt.",
                         lower_bound=1, **d)
    flags.DEFINE_boolean("sample", False, "predict: sample (with --temperature and --top_k) "
                         "instead of taking the most likely word.", **d)
    flags.DEFINE_float("temperature", 1.0, "predict: sampling temperature.", **d)
    flags.DEFINE_integer("top_k", 0, "predict: sample among the k most likely words (0: all).",
                         lower_bound=0, **d)
    common_flags.require_positive(fv, "lr", "temperature", "init_std")
    flags.register_validator("div_val", lambda v: v == 1, flag_values=fv,
                             message="--div_val: only 1 is implemented (NVIDIA's base model)")

PRESETS = {
    "base": {},  # the flags' own defaults: NVIDIA's run_wt103_base.sh
    "tiny": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64,
             "tgt_len": 8, "mem_len": 8, "eval_tgt_len": 8, "eval_mem_len": 16,
             "eval_clamp_len": 12, "eval_batch_size": 4, "batch_size": 4,
             "cutoffs": ["20", "60"], "dropout": 0.0},
    "small": {"n_layer": 4, "d_model": 256, "n_head": 4, "d_head": 64, "d_inner": 1024,
              "tgt_len": 64, "mem_len": 64, "batch_size": 16, "cutoffs": ["2000", "10000"],
              "dropout": 0.1, "lr": 0.01, "lr_warmup_steps": 100, "eval_tgt_len": 64,
              "eval_mem_len": 128, "eval_clamp_len": 128},
}


RECIPE_ROWS = 256  # NVIDIA's global batch: rows of --tgt_len tokens per optimizer step


def model_config(fv: flags.FlagValues, vocab_size: int, pad_multiple: int = 1,
                 static_shapes: bool = False):
    """The model of these flags, its softmax sizes padded to multiples of ``pad_multiple``, its
    tail clusters scored at fixed row counts when ``static_shapes`` (XLA): a TXLConfig."""
    given = f"--cutoffs {','.join(fv.cutoffs)}"
    try:
        cutoffs = tuple(int(c) for c in fv.cutoffs)
    except ValueError:
        raise UsageError(f"{given}: give integers") from None
    if any(c <= 0 for c in cutoffs):
        raise UsageError(f"{given}: every cutoff must be positive")
    if any(b <= a for a, b in zip(cutoffs, cutoffs[1:])):
        raise UsageError(f"{given}: the cutoffs must increase strictly")
    if cutoffs and cutoffs[-1] >= vocab_size:
        if fv["cutoffs"].present:
            raise UsageError(f"{given}: the last cutoff must be below the vocabulary size "
                             f"({vocab_size:,}); the last cluster would be empty")
        # A preset's or the default's cutoffs on a smaller vocabulary: the clusters that
        # would be empty go (the task says so, and the log records the cutoffs used).
        cutoffs = tuple(c for c in cutoffs if c < vocab_size)
    return TXLConfig(
        vocab_size=vocab_size, n_layer=fv.n_layer, d_model=fv.d_model, n_head=fv.n_head,
        d_head=fv.d_head, d_inner=fv.d_inner, cutoffs=cutoffs, dropout=fv.dropout,
        dropatt=fv.dropatt, mem_len=fv.mem_len, clamp_len=fv.clamp_len,
        same_length=fv.same_length, init_std=fv.init_std, pad_multiple=pad_multiple,
        static_shapes=static_shapes)


def preset_config(name: str, vocab_size: int, **overrides):
    """The model of preset ``name`` (its model fields over TXLConfig's base values), for code
    that builds the model without flags (tests)."""
    fields = set(TXLConfig.__dataclass_fields__)
    values = {k: v for k, v in PRESETS[name].items() if k in fields}
    if "cutoffs" in values:
        values["cutoffs"] = tuple(int(c) for c in values["cutoffs"])
    return TXLConfig(**{"vocab_size": vocab_size, **values, **overrides})
