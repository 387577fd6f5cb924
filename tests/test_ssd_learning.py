"""SSD320 learns to detect held-out generated shapes under FP32 and AMP alike (slow)."""
import pytest
from conftest import load_script


@pytest.mark.slow
def test_ssd_reaches_ap50_of_half_under_fp32_and_amp(learning_runs):
    learning_check = load_script("ssd320", "learning_check")
    results = learning_check.run(steps=1800, seed=1, workdir=learning_runs("ssd320"))
    print(learning_check.report(results))  # the README's table (pytest -s shows it)
    assert results["amp"]["summary"]["precision"] == "mixed_bfloat16"
    for precision, r in results.items():
        assert r["summary"]["final_step"] == 1800
        assert r["summary"]["eval_AP50"] >= 0.5, (precision, r["curve"][-3:])
