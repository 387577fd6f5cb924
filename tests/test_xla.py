"""--xla compiles every model's training and evaluation steps (XLA on the CPU: jit_compile is
device-independent for these ops), with each model's real input pipeline, DALI for the two
that read images; a computation XLA cannot compile fails the run instead of falling back."""
import numpy as np
import pytest
import tensorflow as tf
from conftest import OWN_HANDLING, TINY, step_losses

from common import runner
from common.runtime import dllogger


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


# The NGC suite: Transformer-XL's (its adaptive softmax's branches under XLA); SSD320's step
# alone takes XLA on TensorFlow 2.17 two minutes to compile on two cores.
@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", pytest.param(
    "transformerxl", marks=pytest.mark.both_stacks)])
def test_xla_trains_and_evaluates_every_model(model, tmp_path, digits_records, shapes_records,
                                              corpus, capfd):
    task_cls, args, metric = _models(digits_records, shapes_records, corpus)[model]
    argv = ["main.py", *args, "--mode", "train_and_evaluate", "--iter_unit", "batch",
            "--num_iter", "3", "--seed", "1", "--display_every", "1"]
    s = runner.run(task_cls, [*argv, "--xla", "--results_dir", str(tmp_path / "xla")])
    assert s["final_step"] == 3 and np.isfinite(s["final_loss"])
    assert np.isfinite(s[task_cls.config.LOG_NAMES.metric(metric)])
    # jit_compile=True compiles or fails the run: no computation fell back to TensorFlow.
    assert "RET_CHECK" not in capfd.readouterr().err
    if model == "transformerxl":
        # The same steps without XLA: the same losses (XLA once printed two RET_CHECK
        # failures per compile and compiled the step at every step: 5.5 tokens/s against
        # 1,982, txl/adaptive_softmax.py's _take_rows).
        runner.run(task_cls, [*argv, "--results_dir", str(tmp_path / "plain")])
        xla, plain = (step_losses(dllogger.read_records(str(tmp_path / d / "log.json")))
                      for d in ("xla", "plain"))
        assert len(xla) == 3
        np.testing.assert_allclose(xla, plain, rtol=2e-5)


@OWN_HANDLING
@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", "transformerxl"])
def test_xla_evaluation_is_one_program_and_scores_as_the_unpadded_batches(
        model, tmp_path, digits_records, shapes_records, corpus):
    """The evaluation's last, shorter batch (12 images in batches of 5; 8 in batches of 3;
    Transformer-XL's last segment, shorter in time) is padded to the others' shape: its step
    is traced once over two evaluations, and the metrics equal those of the batches as the
    data holds them, scored one by one without padding."""
    from rn50.task import ResNetTask
    from ssd.task import SSDTask
    from txl.task import TransformerXLTask
    task_cls, args = {
        "resnet50v1.5": (ResNetTask, ["--data_dir", digits_records, "--batch_size", "5"]),
        "ssd320": (SSDTask, ["--image_size", "64", "--data_dir", shapes_records,
                             "--batch_size", "3"]),
        "transformerxl": (TransformerXLTask, ["--data_dir", corpus, "--eval_tgt_len", "7"]),
    }[model]
    trainer = runner.setup(task_cls, ["main.py", *TINY, *args, "--xla", "--seed", "1",
                                      "--results_dir", str(tmp_path)])
    trainer.log.close()
    task = trainer.task
    first, second = trainer.evaluate(), trainer.evaluate()
    assert trainer.evaluator.step_function().experimental_get_tracing_count() == 1
    timing = task.config.LOG_NAMES.eval_throughput
    assert {k: v for k, v in first.items() if k != timing} == pytest.approx(
        {k: v for k, v in second.items() if k != timing}, rel=1e-6)
    raw = list(task.eval_dataset())
    assert len({tuple(tf.nest.flatten(b)[0].shape) for b in raw}) == 2  # a shorter last one
    inference = trainer.evaluator.model()
    if task.gathers_eval_outputs:
        outputs = [{k: v.numpy() for k, v in task.eval_outputs(inference, b).items()}
                   for b in raw]
        want = task.summarize({k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]})
    else:
        metrics, state = task.eval_metrics(), task.initial_state(inference, "eval")
        for batch in raw:
            state = task.eval_update(inference, batch, metrics, state)
        want = {m.name: float(m.result()) for m in metrics}
    names = task.config.LOG_NAMES
    for name, value in want.items():
        assert first[names.metric(name)] == pytest.approx(value, rel=1e-5, abs=1e-6), name

