"""The checks scripts/gpu_smoke.sh runs on a GPU, run here against themselves on the CPU: the
parity of training steps (benchtools/parity.py) and of the DALI pipelines
(benchtools/dali_compare.py). What they must pass (a run against a copy of itself) and what
they must flag (a weight, a loss, an image or a label perturbed)."""
import numpy as np
import pytest
from conftest import TINY

from benchtools import dali_compare, parity

MODELS = {"resnet50v1.5": "digits_records", "ssd320": "shapes_records",
          "transformerxl": "corpus"}


@pytest.mark.parametrize("model", list(MODELS))
def test_dali_comparison_passes_the_cpu_against_itself(model, request):
    data = request.getfixturevalue(MODELS[model])
    results = dali_compare.compare(model, data, ("cpu", "cpu"), batches=2, batch_size=4,
                                   image_size=64, tgt_len=8)
    outputs = {(r.split, r.output) for r in results}
    if model == "transformerxl":
        assert outputs == {("train", "inputs"), ("train", "targets")}
    else:
        assert ("eval", "images") in outputs and ("train", "images") in outputs
    assert all(r.passed for r in results), [r.row() for r in results if not r.passed]
    assert all(r.detail.startswith(("identical", "mean |diff| 0.0000")) for r in results)


def test_dali_comparison_flags_images_beyond_the_bound_and_any_other_difference():
    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(4, 8, 8, 3)).astype(np.float32), np.arange(4)
    bound = dali_compare.IMAGE_BOUNDS["resnet50v1.5"]
    near = images + np.float32(bound / 2)  # every pixel off by half the bound: a decoder's
    ok = dali_compare.compare_outputs("eval", ("images", "labels"), [near, labels],
                                      [images, labels], bound)
    assert [r.passed for r in ok] == [True, True]
    far = images + np.float32(2 * bound)
    other = labels.copy()
    other[2] = 7
    bad = dali_compare.compare_outputs("eval", ("images", "labels"), [far, other],
                                       [images, labels], bound)
    assert [r.passed for r in bad] == [False, False]
    assert bad[1].detail == "differ, 1 of 4 values differ"
    cut = dali_compare.compare_outputs("eval", ("labels",), [labels[:3]], [labels], bound)
    assert not cut[0].passed and cut[0].detail.startswith("shapes differ")
    nan = images.copy()
    nan[0, 0, 0, 0] = np.nan
    assert not dali_compare.compare_outputs("eval", ("images",), [nan], [images], bound)[0].passed


@pytest.mark.one_stack("pip", "the comparison's code is the same for both stacks; the steps it "
                       "compares are the training loop's, which both suites run")
def test_parity_passes_two_cpu_runs_bounds_float16_and_flags_a_perturbed_weight(
        tmp_path, digits_records):
    """The CPU float32 reference against a second CPU float32 run (identical), and float16
    emulated on the CPU against it (within the AMP bounds); then the same comparison with one
    weight of the second run perturbed, and with a step's loss off by 1% (0.5% on the first
    step under AMP): flagged."""
    results = parity.run("resnet50v1.5", str(tmp_path), [*TINY, "--data_dir", digits_records],
                         ["cpu-fp32", "cpu-amp"], log=lambda _: None)
    same, half = results
    assert same.passed and same.loss_rel == 0 and same.update_rel == 0, same.detail
    assert same.checksum == same.reference_checksum
    assert half.passed, half.detail
    assert 0 < half.loss_rel < parity.TOLERANCES["amp"][1] and 0 < half.update_rel
    start = parity.model_weights(str(tmp_path / "start" / "checkpoints"))
    ref = parity.model_weights(str(tmp_path / "cpu-fp32" / "checkpoints"))
    losses = parity.step_losses(str(tmp_path / "cpu-fp32"), "resnet50v1.5")
    assert sorted(losses) == [2, 3]  # the two steps after the start checkpoint's
    kernel = max((k for k in ref if "kernel" in k), key=lambda k: ref[k].size)
    moved = {**ref, kernel: ref[kernel].copy()}
    moved[kernel].flat[0] += 0.05  # one weight, about a conv weight's own size
    flagged = parity.compare("gpu-fp32", "fp32", start, moved, ref, losses, losses)
    assert not flagged.passed and flagged.detail.startswith("weights differ by")
    assert flagged.detail.endswith(f"most in {kernel}")
    off = {s: v * (1.01 if s == 3 else 1.0) for s, v in losses.items()}
    flagged = parity.compare("gpu-fp32", "fp32", start, ref, ref, off, losses)
    assert not flagged.passed and flagged.detail.startswith("loss differs by 1.00e-02 at step 3")
    # Under AMP the first step (the forward pass on the same weights) is held tighter.
    off = {s: v * (1.005 if s == 2 else 1.0) for s, v in losses.items()}
    flagged = parity.compare("gpu-amp", "amp", start, ref, ref, off, losses)
    assert not flagged.passed and "at step 2 (tolerance 0.002, the forward pass" in flagged.detail
