"""What a GPU would run on its host in every model's steps, read from TensorFlow's own kernel
table (``common/tools/gpu_placement.py``) on a CPU: each model set up as a GPU process (a GPU
stands in for the one ``devices.pin`` finds, DALI's datasets are recorded, not built), its
training step (the outer function, the forward and backward pass, the update) and its
evaluation step traced with DALI's batches (Transformer-XL's evaluation: tf.data's, copied to
the GPU), under FP32 and AMP (float16, bfloat16), with and without --xla. An op with no GPU
kernel, or a batch-sized tensor through a host-memory argument, is a copy to the host that
waits for the GPU at every step; on commit 5c56af5 this found the finiteness check's int32
argmin, the int32 label and class range checks and SSD320's int32 anchor matching."""
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import OWN_HANDLING, TINY

from common import runner
from common.core import train_step
from common.core.evaluation import Evaluator
from common.data import dali
from common.runtime import devices
from common.runtime.devices import Devices
from common.tools import gpu_placement

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file

STAND_IN = Devices(0, "stand-in GPU", 1)
PRECISIONS = {"fp32": [], "fp16": ["--amp", "--amp_dtype", "float16"],
              "bf16": ["--amp", "--amp_dtype", "bfloat16"]}
# float16 in both suites (each stack's TensorFlow has its own kernel table); FP32 and bfloat16,
# whose steps differ from float16's in the layers' dtypes only: `make test-slow` (the suite's
# time budget)
def _problems(fn, *args) -> list[str]:
    return [str(f) for f in gpu_placement.findings(fn.get_concrete_function(*args))]


def test_the_check_names_host_kernels_and_ops_without_a_gpu_kernel():
    """int32 comparisons and reductions are host kernels on a GPU, ArgMin has no int32 GPU
    kernel; int64 and float32 have device kernels; inside a function XLA compiles whole, XLA
    places the computation; shape arithmetic may pass through host memory."""
    spec = tf.TensorSpec([32], tf.int32)

    @tf.function(autograph=False)
    def int32_checks(x):
        return tf.reduce_max(x) + tf.cast(tf.argmin(x), tf.int32) + tf.reduce_sum(
            tf.cast(x < 3, tf.int32)) + tf.shape(x)[0]

    found = _problems(int32_checks, spec)
    assert any("no GPU kernel for ArgMin(T=int32" in f for f in found), found
    assert any("Less's HostMemory input x: int32[32]" in f for f in found), found
    assert any("Max's HostMemory input input: int32[32]" in f for f in found), found
    assert not any("Shape" in f for f in found), found

    @tf.function(autograph=False)
    def wide(x):
        x = tf.cast(x, tf.int64)
        return tf.reduce_max(x) + tf.argmin(tf.cast(x, tf.float32)) + tf.reduce_sum(
            tf.cast(x < 3, tf.int64))
    assert _problems(wide, spec) == []
    compiled = tf.function(int32_checks.python_function, jit_compile=True, autograph=False)
    assert _problems(compiled, spec) == []

    @tf.function(autograph=False)
    def calls_it(x):  # nested functions are read too
        return int32_checks(x) * 2
    assert any("ArgMin" in f for f in _problems(calls_it, spec))


class _RecordedDALIDataset:
    """Takes DALIDataset's place: what the pipeline would serve (a GPU pipeline cannot be
    built without a GPU)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def _dali_specs(data):
    served = data.served if isinstance(data, dali.EvalPass) else data
    kw = served.dataset.kwargs
    specs = tuple(tf.TensorSpec(s, d) for s, d in zip(kw["output_shapes"], kw["output_dtypes"]))
    return dict(zip(served.names, specs)) if served.names else specs


def _gpu_process(task_cls, args, tmp_path, monkeypatch):
    """The trainer of a process that found a GPU, set up on this CPU."""
    import nvidia.dali.plugin.tf as dali_tf
    monkeypatch.setattr(dali_tf, "DALIDataset", _RecordedDALIDataset)
    monkeypatch.setattr(dali_tf.experimental, "DALIDatasetWithInputs", _RecordedDALIDataset)
    monkeypatch.setattr(devices, "pin", lambda local_rank: STAND_IN)
    trainer = runner.setup(task_cls, ["main.py", *args, "--results_dir", str(tmp_path)])
    trainer.log.close()
    return trainer


def _eval_specs(trainer, evaluator):
    evaluator.batches()  # the pass as the loops read it
    data = evaluator._data
    if isinstance(data, dali.EvalPass):
        batch = _dali_specs(data)
        rows = tf.nest.flatten(batch)[0].shape[0]
        return batch, tf.TensorSpec([rows], tf.bool)
    return data.element_spec


def _models(digits_records, shapes_records, corpus):
    from rn50.task import ResNetTask
    from ssd.task import SSDTask
    from txl.task import TransformerXLTask
    # batches of more rows than shape arithmetic has (gpu_placement.SHAPE_ELEMENTS): no
    # batch-sized tensor passes for a shape
    return {
        "resnet50v1.5": (ResNetTask, ["--data_dir", digits_records, "--batch_size", "24"]),
        "ssd320": (SSDTask, ["--data_dir", shapes_records, "--image_size", "64",
                             "--batch_size", "24"]),
        "transformerxl": (TransformerXLTask, ["--data_dir", corpus, "--batch_size", "6"]),
    }


@pytest.mark.parametrize("precision", [pytest.param("fp32", marks=pytest.mark.slow), "fp16",
                                       pytest.param("bf16", marks=pytest.mark.slow)])
@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", "transformerxl"])
def test_no_step_of_a_gpu_run_computes_on_its_host(model, precision, tmp_path, monkeypatch,
                                                    digits_records, shapes_records, corpus):
    """Every step of each precision, with and without --xla. In float16, also: the step's own
    graph calls the forward and backward pass and the compiled update,
    and computes nothing itself (no per-variable reduction of the finiteness check, 161 sums
    for SSD320; no batch preparation outside the function --xla compiles)."""
    task_cls, args = _models(digits_records, shapes_records, corpus)[model]
    with devices.standing_in(STAND_IN):
        trainer = _gpu_process(task_cls, [*TINY, "--dali", *args, *PRECISIONS[precision]],
                               tmp_path, monkeypatch)
        assert trainer.ctx.capabilities.gpu and trainer.ctx.capabilities.update_compiled
        batch = (_dali_specs(trainer.task.train_dataset()),)
        problems = {}
        for xla in (False, True):
            step = train_step.build(trainer.task, trainer.model, trainer.optimizer,
                                    trainer.guard, trainer.global_step, trainer.dist, xla,
                                    False, True)
            concrete = step.get_concrete_function(batch, trainer.initial_train_states())
            problems[f"train, xla {xla}"] = [str(f) for f in gpu_placement.findings(concrete)]
            evaluator = Evaluator(trainer.task, trainer.ctx, trainer.inference_model,
                                  lambda split: None)
            evaluator.xla = xla
            specs = _eval_specs(trainer, evaluator)
            fn = evaluator.step_function()
            args = (specs[0],) if trainer.task.gathers_eval_outputs else (
                *specs, trainer.task.initial_state(evaluator.model(), "eval"))
            problems[f"eval, xla {xla}"] = _problems(fn, *args)
            if precision == "fp16" and not xla:
                ops = [op.type for op in concrete.graph.get_operations()]
                assert ops.count("StatefulPartitionedCall") == 2  # the pass, the update
                assert set(ops) <= {"StatefulPartitionedCall", "Placeholder", "Identity",
                                    "NoOp"}, sorted(set(ops))
                assert len(trainer.model.trainable_variables) > 20
                assert step.update._jit_compile
    assert problems == {k: [] for k in problems}


def test_the_mixup_draws_stay_out_of_the_compiled_pass(tmp_path, digits_records):
    """Mixup's gamma draws have no XLA kernel: with --mixup the batch is prepared before the
    function --xla compiles, which then trains."""
    from rn50.task import ResNetTask
    trainer = runner.setup(ResNetTask, ["main.py", *TINY, "--data_dir", digits_records,
                                        "--mixup", "0.2", "--xla", "--results_dir",
                                        str(tmp_path)])
    trainer.log.close()
    assert not trainer.task.prepare_compiles
    step = trainer.build_step()
    loss, _ = step((next(iter(trainer.task.train_dataset())),), trainer.initial_train_states())
    assert np.isfinite(float(loss))


@OWN_HANDLING
@pytest.mark.parametrize("gpu, user, want", [(True, None, "1"), (False, None, None),
                                             (True, "0", "0")])
def test_a_float16_gpu_run_sets_cudnn_persistent_batch_norm(gpu, user, want, tmp_path,
                                                            monkeypatch, digits_records):
    """TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1 for --amp (float16) on the stand-in GPU,
    nothing on the CPU, and a value the user set is left as it is; the log says which."""
    from common import precision
    from rn50.task import ResNetTask
    if user is None:
        monkeypatch.delenv(precision.CUDNN_BN_ENV, raising=False)
    else:
        monkeypatch.setenv(precision.CUDNN_BN_ENV, user)
    args = [*TINY, "--data_dir", digits_records, "--amp"]
    with devices.standing_in(STAND_IN if gpu else devices.CPU_ONLY):
        if gpu:
            trainer = _gpu_process(ResNetTask, args, tmp_path, monkeypatch)
        else:
            trainer = runner.setup(ResNetTask, ["main.py", *args, "--results_dir",
                                                str(tmp_path)])
            trainer.log.close()
    assert os.environ.get(precision.CUDNN_BN_ENV) == want
    assert trainer.ctx.precision.compute_dtype == ("float16" if gpu else "bfloat16")
    assert trainer.ctx.precision.describe()[precision.CUDNN_BN_ENV] == int(want == "1")
