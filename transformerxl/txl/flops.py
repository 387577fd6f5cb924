"""Forward FLOPs of Transformer-XL per token, counted from the configuration (matmuls only,
2 per multiply-add), for MFU. What the implementation computes is what is counted:

- per layer and query token: the query projection, k and v over the memory and the segment
  (K = M + Q positions, so K / Q of them per query token), the two score products and the
  probabilities x values over all K keys (masked ones included, as the dense kernels compute
  them; the positional product over K + 1 distances, see attention.rel_shift), the output
  projection and the two feed-forward matmuls; the positional projection (K + 1 distances) is
  per segment, shared by the rows;
- the adaptive softmax: the head (cutoffs[0] words + clusters) for every token, and each tail
  cluster for the fraction of target tokens that fall in it (read from the data).
"""
from __future__ import annotations

import numpy as np


def cluster_fractions(targets: np.ndarray, bounds) -> list[float]:
    """Fraction of ``targets`` in each tail cluster [bounds[k+1], bounds[k+2])."""
    t = np.asarray(targets).ravel()
    return [float(np.mean((t >= lo) & (t < hi))) for lo, hi in zip(bounds[1:-1], bounds[2:])]


def forward_flops_per_token(cfg, tgt_len: int, mem_len: int, batch_size: int,
                            tail_fractions) -> float:
    d, hd, q = cfg.d_model, cfg.n_head * cfg.d_head, tgt_len
    k = mem_len + q
    per_layer = (2 * d * hd                      # q over the segment
                 + 2 * d * 2 * hd * k / q        # k, v over memory + segment
                 + 2 * (3 * k + 1) * hd          # AC, BD (K + 1 distances), probabilities x V
                 + 2 * (k + 1) * d * hd / (q * batch_size)  # positional projection, per segment
                 + 2 * hd * d                    # output projection
                 + 2 * 2 * d * cfg.d_inner)      # feed-forward
    cutoffs = [c for c in cfg.cutoffs if c < cfg.vocab_size]
    bounds = [0, *cutoffs, cfg.vocab_size]
    softmax = 2 * d * (bounds[1] + len(cutoffs))
    for frac, lo, hi in zip(tail_fractions, bounds[1:-1], bounds[2:]):
        softmax += frac * 2 * d * (hi - lo)
    return cfg.n_layer * per_layer + softmax


def run_flops_per_token(argv) -> dict:
    """Forward FLOPs per token of the run ``argv`` (a main.py command line) would make: in
    training (its --tgt_len, --mem_len, --batch_size) and in inference (the --eval_* settings),
    with its training split's tail cluster shares. Sets the run up without training it."""
    import tempfile

    from common import runner
    from txl.task import TransformerXLTask
    with tempfile.TemporaryDirectory() as tmp:
        trainer = runner.setup(TransformerXLTask, [*argv, "--results_dir", tmp])
        task, cfg, f = trainer.task, trainer.task.cfg, trainer.flags
        bounds = [0, *[c for c in cfg.cutoffs if c < cfg.vocab_size], cfg.vocab_size]
        fractions = cluster_fractions(task.tokens("train")[1:], bounds)
        trainer.log.close()
    return {"train": forward_flops_per_token(cfg, f.tgt_len, f.mem_len, f.batch_size, fractions),
            "infer": forward_flops_per_token(cfg, f.eval_tgt_len, f.eval_mem_len,
                                             f.eval_batch_size, fractions),
            "fractions": fractions}
