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

import functools
import json
import os

import numpy as np
import tensorflow as tf

from common.checkpoint.settings import CheckpointSpec
from common.core import schedules
from common.data import dali
from common.errors import DataError, UsageError
from common.task import Task
from txl import config, streams, tfdata_pipeline
from txl.config import WT103_TRAIN_TOKENS
from txl.exports import TXLExports
from txl.lamb import NvidiaLamb
from txl.metrics import PerplexityMetric
from txl.model import TransformerXL
from txl.prepare import utf8_lines, vocab_hash


def _vocab_lines(path: str) -> list[str]:
    """The words of a vocab.txt, one a line; one line naming the file where it cannot be one
    that prepare_dataset.py wrote."""
    vocab = [line.rstrip("\n") for line in utf8_lines(path)]
    if len(vocab) < 2 or len(set(vocab)) != len(vocab):
        raise DataError(f"{path} is not a vocabulary written by prepare_dataset.py (fewer than "
                        "2 words, or repeated ones)")
    return vocab


class TransformerXLTask(Task):
    name = "transformerxl"
    # The last segment is shorter in time: segments are padded to --eval_tgt_len, the padded
    # positions after the real ones, which causal attention keeps unseen.
    eval_padding = (1, "eval_tgt_len")
    exports_class = TXLExports
    item_unit = "tokens"
    headline_metric = "ppl"
    config = config
    # Every weight of its 16-bit layers is read rounded (tests/test_txl_model.py): inference
    # under AMP runs on bfloat16 weights, without casting them every step.
    infers_in_compute_dtype = True

    @classmethod
    def derive_settings(cls, settings, world):
        """Unless a batch size is given (or set by ``--preset``, applied before this by
        ``common.flags.preset_values``), NVIDIA's global batch of 256 rows: 256 / (processes x
        --batch_chunk) rows per process and micro-batch, with --batch_chunk 1 on 8 processes or
        more and 8 / processes below (32 rows a micro-batch, what fits a GPU)."""
        out = {}
        if not settings.given("batch_size") and "batch_size" not in config.PRESETS[
                settings.preset]:
            chunk = (settings.batch_chunk if settings.given("batch_chunk")
                     else 1 if world >= 8 else max(1, 8 // world))
            if config.RECIPE_ROWS % (world * chunk):
                raise UsageError(f"NVIDIA's {config.RECIPE_ROWS} rows per step do not split "
                                 f"over {world} processes x --batch_chunk {chunk}: give "
                                 "--batch_size (rows per process) or another --batch_chunk")
            out.update(batch_size=config.RECIPE_ROWS // (world * chunk), batch_chunk=chunk)
        return out

    def __init__(self, ctx):
        super().__init__(ctx)
        f, dist = self.flags, ctx.dist
        # The corpus's vocabulary; without --data_dir, the one the checkpoint in --model_dir
        # keeps beside its settings (written at training: CheckpointSpec's assets), so a
        # trained model scores and continues text without its corpus.
        self.vocab_from = "--data_dir" if f.data_dir else "--model_dir"
        self.vocab = self._read_vocab() if f.data_dir else self._checkpoint_vocab()
        vocab_size = len(self.vocab) if self.vocab else f.vocab_size
        # Softmax sizes padded to multiples of 8 for tensor cores under AMP on a GPU; a CPU's
        # kernels gain nothing, and padding cost a copy of the last cluster's rows every step.
        pad = ctx.capabilities.tensor_core_padding
        self.cfg = config.model_config(f, vocab_size, pad_multiple=pad,
                                       static_shapes=ctx.precision.xla)
        if len(self.cfg.cutoffs) < len(f.cutoffs):
            ctx.logger.print(f"note: cutoffs {','.join(f.cutoffs)} reach beyond the "
                             f"{vocab_size:,}-word vocabulary; the adaptive softmax uses "
                             f"{','.join(map(str, self.cfg.cutoffs)) or 'none'}")
        if pad > 1:
            odd = {k: v for k, v in (("d_model", f.d_model), ("d_inner", f.d_inner),
                                     ("n_head x d_head", f.n_head * f.d_head)) if v % 8}
            if odd:
                ctx.logger.print("note: " + ", ".join(f"{k} {v}" for k, v in odd.items())
                                 + " not a multiple of 8: tensor cores will be used less")
        if f.mode in ("evaluate", "train_and_evaluate", "inference_benchmark"):
            if f.eval_batch_size % dist.size:
                raise UsageError(f"--eval_batch_size {f.eval_batch_size} must be a multiple of "
                                 f"the number of processes ({dist.size})")
        if f.mode == "predict" and not self.vocab:
            raise UsageError("--mode predict needs a vocabulary: --data_dir (its vocab.txt "
                             "maps words), or a --model_dir whose checkpoint keeps one")
        if f.top_k > vocab_size:
            raise UsageError(f"--top_k {f.top_k} exceeds the vocabulary ({vocab_size:,} words)")
        self._tokens = {}

    # --- data files ---------------------------------------------------------------------
    def _path(self, name: str) -> str:
        path = os.path.join(self.flags.data_dir, name)
        if not os.path.isfile(path):
            raise DataError(f"{path} is missing: prepare the corpus with "
                            "transformerxl/prepare_dataset.py")
        return path

    def _read_vocab(self) -> list[str]:
        vocab = _vocab_lines(self._path("vocab.txt"))
        # The token ids index the vocabulary prepare_dataset.py wrote beside them: a vocab.txt
        # swapped or extended since would map every id to another word without a word.
        info_path = os.path.join(self.flags.data_dir, "corpus-info.json")
        if os.path.exists(info_path):
            try:
                with open(info_path) as f:
                    info = json.load(f)
                expected = info["vocab_size"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise DataError(f"{info_path} is not prepare_dataset.py's corpus-info.json "
                                f"({e})") from None
            if expected != len(vocab):
                raise DataError(f"{self._path('vocab.txt')} has {len(vocab):,} words but "
                                f"{info_path} says the corpus was prepared with {expected:,}: "
                                "the vocabulary was changed after preparation; prepare the "
                                "corpus again")
            recorded = info.get("vocab_sha256")  # corpora prepared since it was recorded
            if recorded and recorded != vocab_hash(vocab):
                raise DataError(f"{self._path('vocab.txt')} is not the vocabulary "
                                f"{info_path} was prepared with (its words were reordered or "
                                "replaced: vocab_sha256 differs); prepare the corpus again")
        return vocab

    def _checkpoint_vocab(self) -> list[str] | None:
        """--model_dir's vocab.txt (the corpus's, copied there at training), or None; its
        hash is checked against the checkpoint's record with the other facts."""
        path = os.path.join(self.flags.model_dir or "", "vocab.txt")
        if not (self.flags.model_dir and os.path.isfile(path)):
            return None
        return _vocab_lines(path)

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
                if len(ids) and ids.min() < 0:
                    at = int(np.argmax(ids < 0))
                    raise DataError(f"{path}: token id {int(ids[at])} at position {at:,} is "
                                    "negative (not written by prepare_dataset.py?)")
                if len(ids) and ids.max() >= self.cfg.vocab_size:
                    at = int(np.argmax(ids >= self.cfg.vocab_size))
                    raise DataError(f"{path}: token id {int(ids[at])} at position {at:,} is "
                                    f"outside the {self.cfg.vocab_size:,}-word vocab.txt "
                                    "(prepared from another corpus?)")
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
        # One row builds every weight: at --batch_size rows this call would be a whole forward
        # pass, seconds of every run's start on a CPU.
        model(tf.zeros((1, 2), tf.int32), model.initial_mems(1), tf.zeros((1, 2), tf.int32))
        return model

    # What a checkpoint is (common/checkpoint/settings.py): the model's shape and its preset;
    # the vocabulary (its size and a hash of its words in order) is checked against the data.
    _SHAPE = ("preset", "n_layer", "d_model", "n_head", "d_head", "d_inner", "div_val", "cutoffs")
    checkpoint = CheckpointSpec(flags=_SHAPE, finetune=_SHAPE, assets=("vocab.txt",))

    def checkpoint_facts(self):
        where = (f"vocab.txt in {self.vocab_from} "
                 f"{getattr(self.flags, self.vocab_from[2:])}" if self.vocab
                 else "--vocab_size (synthetic data)")
        facts = {"vocab_size": (self.cfg.vocab_size, where)}
        if self.vocab:
            facts["vocab_sha256"] = (vocab_hash(self.vocab), where)
        return facts

    def effective_settings(self):
        # vocab.txt's size with --data_dir, and the cutoffs that fit it
        return {"vocab_size": self.cfg.vocab_size,
                "cutoffs": [str(c) for c in self.cfg.cutoffs]}

    def build_optimizer(self, steps_per_epoch, total_steps):
        f = self.flags
        schedule = schedules.cosine(f.lr, min(f.lr_warmup_steps, total_steps), total_steps,
                                    final=f.min_lr_ratio * f.lr)
        return NvidiaLamb(learning_rate=schedule, decay=f.weight_decay,
                          global_clipnorm=f.clip or None,
                          fused=self.ctx.capabilities.fused_optimizer)

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

    def forward_segment(self, model, batch, state):
        f = self.flags
        inputs, targets = batch
        nll, mems = model(inputs, list(state), targets, training=False, mem_len=f.eval_mem_len,
                          clamp_len=f.eval_clamp_len, same_length=f.eval_same_length)
        return nll, tuple(mems)

    def eval_metrics(self):
        return [PerplexityMetric("ppl", True, self.flags.eval_batch_size),
                PerplexityMetric("loss", True, self.flags.eval_batch_size, exp=False),
                PerplexityMetric("ppl_token_weighted", False)]

    def eval_update(self, model, batch, metrics, state=None, valid=None):
        nll, state = self.forward_segment(model, batch, state)
        for m in metrics:
            m.update_state(nll, valid)
        return state

    # --- data ---------------------------------------------------------------------------
    def steps_per_epoch(self):
        """Segments of --tgt_len in each of the global batch's contiguous rows."""
        total = WT103_TRAIN_TOKENS if self.flags.data_dir is None else len(self.tokens("train"))
        return streams.steps_per_epoch(total, self.ctx.global_batch_size,
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
                                         dali.placement(self.ctx.capabilities, f))
        return tfdata_pipeline.dataset(self.tokens("train"), f.batch_size, f.tgt_len, dist.rank,
                                       dist.size, f.batch_chunk, first_step=step)

    def _eval_split(self):
        return self.flags.eval_split or ("test" if self.flags.mode == "evaluate" else "valid")

    @property
    def eval_split(self) -> str:
        return {"valid": "validation"}.get(self._eval_split(), self._eval_split())

    def eval_dataset(self, drop_short: bool = False):
        """This rank's rows of NVIDIA's evaluation segments, in order; the last is shorter."""
        f, dist = self.flags, self.ctx.dist
        tokens = self.tokens(self._eval_split())
        if tfdata_pipeline.eval_segment_count(len(tokens), f.eval_batch_size, f.eval_tgt_len,
                                              drop_short) < 1:
            raise DataError(f"the {self._eval_split()} split ({len(tokens):,} tokens) is too "
                            f"short for one segment of --eval_tgt_len {f.eval_tgt_len} in each "
                            f"of --eval_batch_size {f.eval_batch_size} streams")
        return tfdata_pipeline.eval_dataset(tokens, f.eval_batch_size, f.eval_tgt_len, dist.rank,
                                            dist.size, drop_short)

    def items_in(self, batch):
        return int(np.prod(batch[0].shape))

    # --- inference ----------------------------------------------------------------------
    @functools.cached_property
    def word_index(self) -> dict:
        return {w: i for i, w in enumerate(self.vocab)}

    def encode(self, text: str) -> list[int]:
        index = self.word_index
        unk = index.get("<unk>")
        ids = []
        for word in text.split():
            if word not in index and unk is None:
                raise DataError(f"'{word}' is not in the vocabulary, which has no <unk>")
            ids.append(index.get(word, unk))
        return ids
