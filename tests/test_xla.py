"""--xla compiles every model's training and evaluation steps (XLA on the CPU: jit_compile is
device-independent for these ops), with each model's real input pipeline, DALI for the two
that read images; a computation XLA cannot compile fails the run instead of falling back."""
import numpy as np
import pytest
from conftest import TINY

from common import runner


def _models(digits_records, shapes_records, corpus):
    from rn50.task import ResNetTask
    from ssd.task import SSDTask
    from txl.task import TransformerXLTask
    return {
        "resnet50v1.5": (ResNetTask, [*TINY, "--data_dir", digits_records, "--dali"], "top1"),
        "ssd320": (SSDTask, [*TINY, "--image_size", "64", "--data_dir",
                             shapes_records, "--dali"], "AP50"),
        # Transformer-XL's adaptive softmax scores each tail cluster's tokens at a fixed row
        # count per bucket under XLA (txl/adaptive_softmax.py, _tail_nll_static).
        "transformerxl": (TransformerXLTask, [*TINY, "--data_dir", corpus], "ppl"),
    }


@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", "transformerxl"])
def test_xla_trains_and_evaluates_every_model(model, tmp_path, digits_records, shapes_records,
                                              corpus):
    task_cls, args, metric = _models(digits_records, shapes_records, corpus)[model]
    argv = ["main.py", *args, "--xla", "--mode", "train_and_evaluate", "--iter_unit", "batch",
            "--num_iter", "2", "--seed", "1", "--results_dir", str(tmp_path)]
    s = runner.run(task_cls, argv)
    assert s["final_step"] == 2 and np.isfinite(s["final_loss"])
    assert np.isfinite(s[task_cls.config.LOG_NAMES.metric(metric)])
    # jit_compile=True compiles or fails the run: no computation fell back to TensorFlow.
