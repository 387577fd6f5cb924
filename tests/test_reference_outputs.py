"""Stored small outputs: each model's tiny configuration trained for a few steps from a fixed
seed on its synthetic data, the per-step losses compared with ``data/reference_outputs.json``.
A change that moves the numbers (an initializer, a loss, a layer's order, the data) fails here
and must be looked at, then recorded again on purpose::

    python tests/test_reference_outputs.py --write [MODEL ...]   # after a deliberate change

The tolerances cover TensorFlow releases (2.17 in NGC's image, 2.21 from pip) and CPUs with
other instruction sets, whose kernels round differently: 0.2% in float32; under AMP 0.2% for the
first step's loss (a forward pass from the seeded weights) and 3% after it, where bfloat16's
rounding of the updates compounds (1.1% apart at step 4 between the two stacks). A real change
moves the first loss by more (shared initializers moved ResNet's by 4%).
"""
import json
import os
import sys

import numpy as np
import pytest
from conftest import TINY, step_losses

from common import runner
from common.runtime import dllogger
from rn50.task import ResNetTask
from ssd.task import SSDTask
from txl.task import TransformerXLTask

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "reference_outputs.json")
STEPS = ["--mode", "train", "--iter_unit", "batch", "--num_iter", "4", "--display_every", "1",
         "--seed", "11"]
RUNS = {
    "resnet50v1.5": (ResNetTask, [*TINY]),
    # SSD320 with this repository's v1.5 trunk (its default until TF-slim's became it), and
    # with the default trunk, TF-slim's resnet_v1.
    "ssd320": (SSDTask, [*TINY, "--trunk", "resnet_v1.5"]),
    "ssd320/resnet_v1": (SSDTask, [*TINY]),
    "transformerxl": (TransformerXLTask, [*TINY, "--vocab_size", "100",
                                          "--dropout", "0.1"]),
}
PRECISIONS = {"fp32": [], "amp": ["--amp"]}
RTOL = {"fp32": (2e-3, 2e-3), "amp": (2e-3, 3e-2)}  # (first step, later steps)


def losses(model: str, precision: str, results_dir: str) -> list[float]:
    task, args = RUNS[model]
    runner.run(task, ["main.py", *STEPS, *args, *PRECISIONS[precision],
                      "--results_dir", results_dir])
    records = dllogger.read_records(os.path.join(results_dir, "log.json"))
    return step_losses(records)


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("model", list(RUNS))
def test_tiny_models_give_their_stored_losses(model, precision, tmp_path):
    with open(PATH) as fh:
        stored = json.load(fh)[model][precision]
    got = losses(model, precision, str(tmp_path))
    first, later = RTOL[precision]
    message = f"{model} {precision}: the numbers moved; if on purpose, run this file with --write"
    assert len(got) == len(stored)
    np.testing.assert_allclose(got[0], stored[0], rtol=first, err_msg=message)
    np.testing.assert_allclose(got[1:], stored[1:], rtol=later, err_msg=message)


if __name__ == "__main__" and sys.argv[1:2] == ["--write"]:
    # --write [MODEL ...]: the named runs (default: all), the others kept as stored.
    import tempfile

    with open(PATH) as fh:
        out = json.load(fh)
    for m in sys.argv[2:] or RUNS:
        for p in PRECISIONS:
            with tempfile.TemporaryDirectory() as tmp:
                out.setdefault(m, {})[p] = losses(m, p, tmp)
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    with open(PATH, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    print(json.dumps(out, indent=1))
