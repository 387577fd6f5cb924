"""Runs started in-process (``common.runner.run``, as the benchmark scripts and many tests do)
are the runs the ``main.py`` command line gives, and they leave the process as they found it.

The root cause these guard against: the models' kernel initializers were module-level (or
per-layer) instances shared by many weights. A Keras initializer draws its seed when it is made
and returns the same values at every call, so (1) seeds drawn at import did not follow
``--seed``: every run inside one process started from the same weights, and every new process
from other ones; (2) every kernel of one shape started identical (SSD's eight tower convolutions,
ResNet's repeated blocks, Transformer-XL's two attention biases).
"""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, step_losses

from common import main_py, runner
from common.runtime import dllogger
from rn50.model import build_resnet
from rn50.task import ResNetTask
from ssd.model import build_ssd
from txl.config import preset_config
from txl.model import TransformerXL

ARGS = ["--mode", "train", "--iter_unit", "batch", "--num_iter", "4", "--seed", "3", *TINY]
PRECISION = {"fp32": [], "amp": ["--amp"]}


def _losses(results_dir):
    records = dllogger.read_records(os.path.join(results_dir, "log.json"))
    return step_losses(records)


def test_runs_in_one_process_equal_main_py_processes(tmp_path):
    command_line = {p: _losses_of_main_py(tmp_path / f"cli_{p}", p) for p in PRECISION}
    assert not np.allclose(command_line["fp32"], command_line["amp"], rtol=1e-6)  # they differ
    for i, p in enumerate(["fp32", "amp", "amp", "fp32"]):  # both orders, one process
        out = tmp_path / f"run{i}_{p}"
        runner.run(ResNetTask, ["main.py", *ARGS, *PRECISION[p], "--results_dir", str(out)])
        np.testing.assert_allclose(_losses(out), command_line[p], rtol=1e-6, err_msg=f"run {i}")


def _losses_of_main_py(out, precision):
    main_py.run_main_py(os.path.join(ROOT, "resnet50v1.5", "main.py"), ARGS + PRECISION[precision],
                       str(out))
    return _losses(out)


@pytest.mark.both_stacks
def test_a_run_leaves_no_process_state_behind(tmp_path):
    policy = keras.mixed_precision.dtype_policy().name
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    python_draw = np.random.get_state()[1][:4].copy()
    runner.run(ResNetTask, ["main.py", *ARGS, "--amp", "--no_tf32" if tf32 else "--tf32",
                            "--results_dir", str(tmp_path)])
    assert keras.mixed_precision.dtype_policy().name == policy == "float32"
    assert tf.config.experimental.tensor_float_32_execution_enabled() == tf32
    np.testing.assert_array_equal(np.random.get_state()[1][:4], python_draw)


def _random_kernels(model):
    """Randomly initialised weights (not constant-initialised biases, gammas, statistics)."""
    out = {}
    for v in model.weights:
        a = v.numpy()
        if a.size > 1 and np.std(a) > 0:
            out[v.path] = a
    return out


def _builds():
    yield "resnet50", lambda: build_resnet("resnet50", 10, 64)
    yield "ssd tiny", lambda: build_ssd("resnet_tiny", 4, 128)
    cfg = preset_config("tiny", vocab_size=60, mem_len=4, dropout=0.1)

    def txl():
        model = TransformerXL(cfg)
        tokens = tf.zeros((1, 3), tf.int32)
        model(tokens, model.initial_mems(1), tokens)
        return model
    yield "transformer-xl tiny", txl


@pytest.mark.parametrize("name,build", list(_builds()), ids=[n for n, _ in _builds()])
def test_no_two_weights_start_alike_and_the_seed_decides_them(name, build):
    keras.utils.set_random_seed(7)
    first = _random_kernels(build())
    seen = {}
    for path, a in first.items():
        key = a.ravel()[:64].tobytes()
        assert key not in seen, f"{name}: {path} starts with {seen.get(key)}'s values"
        seen[key] = path
    keras.utils.set_random_seed(7)
    again = _random_kernels(build())
    assert [a.tobytes() for a in first.values()] == [a.tobytes() for a in again.values()]
