"""Transformer-XL base on WikiText-103: the model, data, loss and perplexity the shared loops run.

Recipe defaults are NVIDIA's (``run_wt103_base.sh train``): 16 layers, d_model 512, 8 x 64
heads, d_inner 2048, dropout 0.1, segments of 192 with 192 of memory, global batch 256, LAMB
(decay 0.01) at 0.01 with 1000 warm-up steps and a cosine to 0.1 x at 40,000 steps, gradients
clipped to a global norm of 0.25 after the allreduce. The learning rate is not scaled with the
global batch: NVIDIA's recipe keeps the global batch at 256 and changes ``--batch_chunk``.

Evaluation follows NVIDIA's protocol (``run_wt103_base.sh eval``): 16 streams, segments of 64
with 640 of memory, clamp_len 400 and same_length, memory carried from segment to segment and
starting as zeros; the perplexity weighs every segment equally (the token-weighted one is beside
it). The memory is the per-run state that ``common/trainer.py`` carries from step to step.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os

import keras
import numpy as np
import tensorflow as tf
from absl import flags

from common import flags as common_flags
from common.errors import DataError, UsageError
from common.schedules import WarmupCosine
from common.task import Task
from txl import tfdata_pipeline
from txl.generate import generate
from txl.lamb import NvidiaLamb
from txl.model import WT103_CUTOFFS, TransformerXL, TXLConfig

WT103_VOCAB = 267_735
WT103_TRAIN_TOKENS = 103_227_021  # the nominal epoch of synthetic data
SPLITS = ("train", "valid", "test")


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
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


class PerplexityMetric(keras.metrics.Metric):
    """exp(mean NLL). Its variables are sums, so ranks can add them up (common/trainer.py).
    ``per_segment``: NVIDIA's figure, each segment's mean NLL weighted equally; a rank holding
    ``rows`` of the ``global_rows`` streams adds that fraction of a segment. Otherwise the mean
    over every token."""

    def __init__(self, name: str, per_segment: bool, global_rows: int = 1):
        super().__init__(name=name, dtype="float32")
        self.per_segment, self.global_rows = per_segment, global_rows
        self.loss_sum = self.add_variable(shape=(), initializer="zeros", name="loss_sum",
                                          dtype="float64")
        self.weight = self.add_variable(shape=(), initializer="zeros", name="weight",
                                        dtype="float64")

    def update_state(self, nll):
        nll = tf.cast(nll, tf.float64)
        rows, tokens = tf.cast(tf.shape(nll)[0], tf.float64), tf.cast(tf.size(nll), tf.float64)
        total = tf.reduce_sum(nll)
        if self.per_segment:  # (sum / (rows * q)) * (rows / global_rows)
            self.loss_sum.assign_add(total / tokens * rows / self.global_rows)
            self.weight.assign_add(rows / self.global_rows)
        else:
            self.loss_sum.assign_add(total)
            self.weight.assign_add(tokens)

    def result(self):
        return tf.exp(self.loss_sum / tf.maximum(self.weight, 1e-30))


class TransformerXLTask(Task):
    name = "transformerxl"
    item_unit = "tokens"
    flag_defaults = {"batch_size": 256, "num_iter": 40000, "iter_unit": "batch"}
    define_flags = staticmethod(define_flags)

    def __init__(self, ctx):
        super().__init__(ctx)
        f, dist = self.flags, ctx.dist
        self.vocab = self._read_vocab() if f.data_dir else None
        vocab_size = len(self.vocab) if self.vocab else f.vocab_size
        try:
            cutoffs = tuple(int(c) for c in f.cutoffs)
        except ValueError:
            raise UsageError(f"--cutoffs {','.join(f.cutoffs)}: give integers") from None
        amp = ctx.precision.policy != "float32"
        self.cfg = TXLConfig(
            vocab_size=vocab_size, n_layer=f.n_layer, d_model=f.d_model, n_head=f.n_head,
            d_head=f.d_head, d_inner=f.d_inner, cutoffs=cutoffs, dropout=f.dropout,
            dropatt=f.dropatt, mem_len=f.mem_len, clamp_len=f.clamp_len,
            same_length=f.same_length, init_std=f.init_std, pad_multiple=8 if amp else 1)
        if amp:
            odd = {k: v for k, v in (("d_model", f.d_model), ("d_inner", f.d_inner),
                                     ("n_head x d_head", f.n_head * f.d_head)) if v % 8}
            if odd:
                ctx.logger.print("note: " + ", ".join(f"{k} {v}" for k, v in odd.items())
                                 + " not a multiple of 8: tensor cores will be used less")
        if f.mode in ("evaluate", "train_and_evaluate", "inference_benchmark"):
            if f.eval_batch_size % dist.size:
                raise UsageError(f"--eval_batch_size {f.eval_batch_size} must be a multiple of "
                                 f"the number of processes ({dist.size})")
        if f.mode == "predict" and not f.data_dir:
            raise UsageError("--mode predict needs --data_dir (its vocab.txt maps words)")
        self._tokens = {}

    # --- data files ---------------------------------------------------------------------
    def _path(self, name: str) -> str:
        path = os.path.join(self.flags.data_dir, name)
        if not os.path.isfile(path):
            raise DataError(f"{path} is missing: prepare the corpus with "
                            "transformerxl/prepare_dataset.py")
        return path

    def _read_vocab(self) -> list[str]:
        with open(self._path("vocab.txt"), encoding="utf-8") as fh:
            vocab = fh.read().split("\n")[:-1]
        if len(vocab) < 2 or len(set(vocab)) != len(vocab):
            raise DataError(f"{self._path('vocab.txt')} is not a vocabulary written by "
                            "prepare_dataset.py (fewer than 2 words, or repeated ones)")
        return vocab

    def tokens(self, split: str) -> np.ndarray:
        """A split's token ids (memory-mapped), checked against the vocabulary once."""
        if split not in self._tokens:
            if self.flags.data_dir is None:
                self._tokens[split] = self._synthetic(split)
            else:
                path = self._path(f"{split}.npy")
                try:
                    ids = np.load(path, mmap_mode="r")
                except (ValueError, OSError) as e:
                    raise DataError(f"{path} is not a NumPy array ({e})") from None
                if ids.ndim != 1 or ids.dtype != np.int32:
                    raise DataError(f"{path} holds {ids.dtype} {ids.shape}, not int32 token ids")
                if len(ids) and (ids.min() < 0 or ids.max() >= self.cfg.vocab_size):
                    raise DataError(f"{path}: token id {int(ids.max())} is outside the "
                                    f"{self.cfg.vocab_size:,}-word vocab.txt (prepared from "
                                    "another corpus?)")
                self._tokens[split] = ids
        return self._tokens[split]

    def _synthetic(self, split: str) -> np.ndarray:
        """Random tokens with Zipf's law over the vocabulary (p of rank r ~ 1 / r), the shape of
        real text's word frequencies: the adaptive softmax's tails see a natural share of the
        tokens (uniform tokens would put most of them in the largest tail). 50 steps' worth."""
        rng = np.random.default_rng(0 if split == "train" else 1)
        rows = max(self.ctx.global_batch_size, self.flags.eval_batch_size)
        n = rows * (max(self.flags.tgt_len, self.flags.eval_tgt_len) * 50 + 1)
        p = 1.0 / np.arange(1, self.cfg.vocab_size + 1)
        return rng.choice(self.cfg.vocab_size, size=n, p=p / p.sum()).astype(np.int32)

    # --- model and optimisation ---------------------------------------------------------
    def build_model(self):
        model = TransformerXL(self.cfg, name="transformerxl")
        b = self.flags.batch_size
        model(tf.zeros((b, 2), tf.int32), model.initial_mems(b), tf.zeros((b, 2), tf.int32))
        return model

    def effective_settings(self):
        return {"vocab_size": self.cfg.vocab_size}  # vocab.txt's with --data_dir

    def build_optimizer(self, steps_per_epoch, total_steps):
        f = self.flags
        schedule = WarmupCosine(f.lr, min(f.lr_warmup_steps, total_steps), total_steps,
                                final=f.min_lr_ratio * f.lr)
        return NvidiaLamb(learning_rate=schedule, decay=f.weight_decay,
                          global_clipnorm=f.clip or None)

    def initial_state(self, model, purpose):
        """Zero memories: --mem_len of them per training row, --eval_mem_len in evaluation."""
        f = self.flags
        if purpose == "train":
            return tuple(model.initial_mems(f.batch_size))
        return tuple(model.initial_mems(f.eval_batch_size // self.ctx.dist.size, f.eval_mem_len))

    def train_loss(self, model, batch, state=None):
        inputs, targets = batch
        nll, mems = model(inputs, list(state), targets, training=True)
        return tf.reduce_mean(nll), tuple(mems)

    def _eval_forward(self, model, batch, state):
        f = self.flags
        inputs, targets = batch
        nll, mems = model(inputs, list(state), targets, training=False, mem_len=f.eval_mem_len,
                          clamp_len=f.eval_clamp_len, same_length=f.eval_same_length)
        return nll, tuple(mems)

    def eval_metrics(self):
        return [PerplexityMetric("ppl", True, self.flags.eval_batch_size),
                PerplexityMetric("ppl_token_weighted", False)]

    def eval_update(self, model, batch, metrics, state=None):
        nll, state = self._eval_forward(model, batch, state)
        for m in metrics:
            m.update_state(nll)
        return state

    def infer(self, model, inputs, state=None):
        return self._eval_forward(model, inputs, state)

    # --- data ---------------------------------------------------------------------------
    def steps_per_epoch(self):
        """Segments of --tgt_len in each of the global batch's contiguous rows."""
        total = WT103_TRAIN_TOKENS if self.flags.data_dir is None else len(self.tokens("train"))
        return tfdata_pipeline.steps_per_epoch(total, self.ctx.global_batch_size,
                                               self.flags.tgt_len)

    def train_dataset(self):
        return self.train_dataset_at(0)

    def train_dataset_at(self, step):
        f, dist = self.flags, self.ctx.dist
        if f.dali:
            from txl import dali_pipeline
            self.tokens("train")  # checked before DALI reads it
            return dali_pipeline.dataset(self._path("train.npy"), f.batch_size, f.tgt_len,
                                         dist.rank, dist.size, f.batch_chunk, step,
                                         dist.local_rank)
        return tfdata_pipeline.dataset(self.tokens("train"), f.batch_size, f.tgt_len, dist.rank,
                                       dist.size, f.batch_chunk, first_step=step)

    def _eval_split(self):
        return self.flags.eval_split or ("test" if self.flags.mode == "evaluate" else "valid")

    def eval_dataset(self, drop_short: bool = False):
        """This rank's rows of NVIDIA's evaluation segments, in order; the last is shorter."""
        f, dist = self.flags, self.ctx.dist
        tokens = self.tokens(self._eval_split())
        if tfdata_pipeline.eval_segment_count(len(tokens), f.eval_batch_size, f.eval_tgt_len,
                                              drop_short) < 1:
            raise DataError(f"the {self._eval_split()} split is too short for one segment of "
                            f"--eval_tgt_len {f.eval_tgt_len} in {f.eval_batch_size} streams")
        return tfdata_pipeline.eval_dataset(tokens, f.eval_batch_size, f.eval_tgt_len, dist.rank,
                                            dist.size, drop_short)

    def inference_dataset(self):
        return self.eval_dataset(drop_short=True).repeat()

    def items_in(self, batch):
        return int(np.prod(batch[0].shape))

    def inference_inputs(self, batch):
        return batch

    # --- inference ----------------------------------------------------------------------
    @functools.cached_property
    def _index(self) -> dict:
        return {w: i for i, w in enumerate(self.vocab)}

    def encode(self, text: str) -> list[int]:
        index = self._index
        unk = index.get("<unk>")
        ids = []
        for word in text.split():
            if word not in index and unk is None:
                raise DataError(f"'{word}' is not in the vocabulary, which has no <unk>")
            ids.append(index.get(word, unk))
        return ids

    def predict(self, model, paths):
        f = self.flags
        records = []
        for path in paths:
            try:
                with open(path, encoding="utf-8") as fh:
                    prompts = [line.strip() for line in fh if line.strip()]
            except UnicodeDecodeError:
                raise DataError(f"{path} is not UTF-8 text") from None
            if not prompts:
                raise DataError(f"{path} has no prompt (one prompt a line)")
            for prompt in prompts:
                ids = generate(model, self.encode(prompt), f.gen_len, greedy=not f.sample,
                               temperature=f.temperature, top_k=f.top_k, seed=f.seed)
                records.append({"file": path, "prompt": prompt,
                                "continuation": " ".join(self.vocab[i] for i in ids),
                                "token_ids": ids, "sampled": f.sample})
        return records

    def export(self, model, export_dir):
        """A SavedModel with two signatures over (B, Q) int32 tokens and the memory
        (n_layer, B, M, d_model) float32 (zeros of any M to start; M grows up to --mem_len):
        ``serving_default`` -> the next word's log-probabilities (B, vocab) and the new memory;
        ``score`` (also given targets) -> the NLL (B, Q) and the new memory."""
        cfg = self.cfg
        module = tf.Module()
        # The variables, not the Keras model: saving the model would trace its own default
        # signature, which a call with memories and targets does not have.
        module.weights = [v.value for v in model.variables]
        tokens = tf.TensorSpec([None, None], tf.int32, name="tokens")
        mems = tf.TensorSpec([cfg.n_layer, None, None, cfg.d_model], tf.float32, name="mems")

        @tf.function(input_signature=[tokens, mems])
        def next_word(tokens, mems):
            logp, new = model.log_prob(tokens, tf.unstack(mems, cfg.n_layer))
            return {"log_probs": logp[:, -1], "mems": tf.stack(new)}

        @tf.function(input_signature=[tokens, tf.TensorSpec([None, None], tf.int32,
                                                            name="targets"), mems])
        def score(tokens, targets, mems):
            nll, new = model(tokens, tf.unstack(mems, cfg.n_layer), targets, training=False)
            return {"nll": nll, "mems": tf.stack(new)}
        module.next_word, module.score = next_word, score
        tf.saved_model.save(module, export_dir,
                            signatures={"serving_default": next_word, "score": score})
        with open(os.path.join(export_dir, "config.json"), "w") as fh:
            json.dump(dataclasses.asdict(cfg), fh, indent=1)
        if self.vocab:
            with open(os.path.join(export_dir, "vocab.txt"), "w", encoding="utf-8") as fh:
                fh.write("".join(w + "\n" for w in self.vocab))
