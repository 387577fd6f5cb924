"""Slow: ResNet-50 learns real digits within 3 epochs, under FP32 and AMP alike, from each of
three seeds (scripts/learning_check.py)."""
import pytest
from conftest import load_script


@pytest.mark.slow
def test_resnet50_learns_digits_under_fp32_and_amp_alike(learning_runs):
    learning_check = load_script("resnet50v1.5", "learning_check")
    out = learning_check.run(epochs=3, seeds=(1, 2, 3), workdir=learning_runs("resnet50v1.5"))
    print(learning_check.report(out))  # the README's table (pytest -s shows it)
    for seed in out["fp32"]:
        fp32, amp = out["fp32"][seed], out["amp"][seed]
        assert amp["summary"]["precision"] == "mixed_bfloat16"
        for r in (fp32, amp):
            assert r["epoch_top1"][-1] > 0.4  # chance is 0.1
            assert r["epoch_loss"][-1] < r["epoch_loss"][0]
        # One seed, both precisions: the curves stay within 15% of each other every epoch.
        for a, b in zip(fp32["epoch_loss"], amp["epoch_loss"]):
            assert abs(a - b) < 0.15 * a, (seed, fp32["epoch_loss"], amp["epoch_loss"])
