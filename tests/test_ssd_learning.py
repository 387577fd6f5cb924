"""SSD320 learns to detect held-out generated shapes under FP32 and AMP alike (slow)."""
import importlib.util
import os

import pytest

from conftest import ROOT


def _learning_check():
    # ResNet's script has the same file name: load this one under a name of its own.
    path = os.path.join(ROOT, "ssd320", "scripts", "learning_check.py")
    spec = importlib.util.spec_from_file_location("ssd_learning_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_ssd_reaches_ap50_of_half_under_fp32_and_amp():
    results = _learning_check().run(steps=1200, seed=1)
    assert results["amp"]["summary"]["precision"] == "mixed_bfloat16"
    for precision, r in results.items():
        assert r["summary"]["final_step"] == 1200
        assert r["summary"]["eval_AP50"] >= 0.5, (precision, r["curve"][-3:])
