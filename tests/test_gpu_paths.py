"""The GPU branches, tested on a CPU by what they build: a GPU stands in
(``common.runtime.devices``), and each test inspects the input pipeline, the step's graph or the
launch decision a GPU run would get. None of these computes on a GPU; ``scripts/gpu_smoke.sh`` is
what does."""
import contextlib
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY

from common import runner
from common.data import dali, dali_graph
from common.runtime import devices, distributed
from common.runtime.devices import Devices
from common.task import Repeated

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file

STAND_IN = Devices(1, "stand-in GPU", 2)  # the second of two GPUs: DALI's device must follow


class _RecordedDALIDataset:
    """Takes DALIDataset's place: records its arguments and the device scope it was made in
    (a GPU pipeline cannot be built without a GPU)."""

    def __init__(self, **kwargs):
        from tensorflow.python.eager import context
        self.kwargs, self.device = kwargs, context.context().device_name

    def pipeline_outputs(self):
        return self.kwargs["pipeline"]._graph_out

    def ops(self):
        """Every DALI operator instance behind the outputs: {name: (device, arguments)}."""
        seen = {}

        def walk(node):
            src = node.source
            if src._name not in seen:
                seen[src._name] = (src._op.schema_name, src._op.device, src._op._init_args)
                for i in src._inputs:
                    walk(i)
        for out in self.pipeline_outputs():
            walk(out)
        return list(seen.values())


@contextlib.contextmanager
def _gpu_stand_in(monkeypatch, trainer=None):
    import nvidia.dali.plugin.tf as dali_tf
    monkeypatch.setattr(dali_tf, "DALIDataset", _RecordedDALIDataset)
    monkeypatch.setattr(dali_tf.experimental, "DALIDatasetWithInputs", _RecordedDALIDataset)
    if trainer is not None:
        monkeypatch.setattr(trainer.dist, "devices", STAND_IN)
        monkeypatch.setattr(trainer.ctx, "capabilities", devices.Capabilities(
            STAND_IN, trainer.ctx.precision.compute_dtype))
    with devices.standing_in(STAND_IN):
        yield


def _setup(task_cls, args, tmp_path):
    trainer = runner.setup(task_cls, ["main.py", *args, "--results_dir", str(tmp_path)])
    trainer.log.close()
    return trainer


def _models(digits_records, shapes_records, corpus):
    from rn50.task import ResNetTask
    from ssd.task import SSDTask
    from txl.task import TransformerXLTask
    return {
        "resnet50v1.5": (ResNetTask, [*TINY, "--data_dir", digits_records, "--dali"],
                         ("train", "eval")),
        "ssd320": (SSDTask, [*TINY, "--image_size", "64", "--data_dir",
                             shapes_records, "--dali"], ("train", "eval")),
        "transformerxl": (TransformerXLTask, [*TINY, "--data_dir", corpus, "--dali"],
                          ("train",)),
    }


@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", "transformerxl"])
@pytest.mark.parametrize("options", [[], ["--amp", "--amp_dtype", "float16"], ["--dali_cpu"],
                                     ["--dali_hw_decoder_load", "0.5"]],
                         ids=["fp32", "fp16", "dali_cpu", "hw_load"])
def test_dali_on_a_gpu_serves_every_output_from_that_gpu_with_nothing_after_it(
        model, options, tmp_path, monkeypatch, digits_records, shapes_records, corpus):
    """B2, B3: what each model's --dali pipeline gives the loops on a GPU (the second of two
    here) is the DALIDataset itself, made under /gpu:0 with DALI's device_id the GPU
    TensorFlow computes on, every pipeline output on the GPU; images decoded by nvJPEG with
    its memory hints and the hardware decoders' share (0.99 unless --dali_hw_decoder_load
    says otherwise; on the CPU with --dali_cpu), in float16 under float16 AMP."""
    task_cls, args, splits = _models(digits_records, shapes_records, corpus)[model]
    trainer = _setup(task_cls, [*args, *options], tmp_path)
    with _gpu_stand_in(monkeypatch, trainer):
        for split in splits:
            data = trainer.task.train_dataset() if split == "train" else \
                trainer.task.eval_dataset()
            served = data.served if isinstance(data, dali.EvalPass) else data
            # A plain iterable holding the DALIDataset itself: no tf.data transformation.
            assert type(served) is dali.Served and not isinstance(data, tf.data.Dataset)
            recorded = served.dataset
            assert isinstance(recorded, _RecordedDALIDataset), type(recorded)
            assert recorded.device.endswith("/device:GPU:0"), recorded.device
            assert recorded.kwargs["device_id"] == STAND_IN.gpu_index == 1
            assert {o.device for o in recorded.pipeline_outputs()} == {"gpu"}
            if model == "transformerxl":
                continue
            (decoder,) = [op for op in recorded.ops() if op[0].startswith("decoders__")]
            if "--dali_cpu" in options:
                assert decoder[1] == "cpu"
            else:
                assert decoder[1] == "mixed"
                assert decoder[2]["device_memory_padding"] == dali_graph.DEVICE_MEMORY_PADDING
                load = 0.5 if "--dali_hw_decoder_load" in options else 0.99
                assert decoder[2]["hw_decoder_load"] == load
            float16 = "float16" in options
            assert recorded.kwargs["output_dtypes"][0] == (tf.float16 if float16 else tf.float32)
            (normalize,) = [op for op in recorded.ops() if op[0] == "CropMirrorNormalize"]
            assert str(normalize[2]["dtype"]).endswith("FLOAT16" if float16 else "FLOAT")


@pytest.mark.parametrize("extra, message", [
    (["--dali_hw_decoder_load", "0.5"], "--dali_hw_decoder_load shares DALI's JPEG decoding: "
                                        "it needs --dali"),
    (["--dali", "--dali_cpu", "--dali_hw_decoder_load", "0.5"], "--dali_hw_decoder_load "
     "shares nvJPEG's decoding on the GPU; --dali_cpu decodes on the CPU: give one of them"),
    (["--dali", "--dali_hw_decoder_load", "1.5"], "flag --dali_hw_decoder_load=1.5: 1.5 is "
                                                  "not a number in the range [0.0, 1.0]"),
    (["--dali", "--dali_hw_decoder_load", "nan"], "--dali_hw_decoder_load is a share of the "
                                                  "JPEGs, in [0, 1]: not nan"),
])
def test_the_hardware_decoders_share_is_refused_where_it_means_nothing(extra, message,
                                                                       tmp_path):
    from common import flags
    with pytest.raises(flags.UsageError) as e:
        flags.parse(flags.build(), ["main.py", "--data_dir", str(tmp_path), *extra])
    assert str(e.value).startswith(message), str(e.value)


def test_an_evaluation_pass_is_one_shard_with_the_padding_cut_on_the_device(digits_records,
                                                                           tmp_path):
    """DALI pads the shard's last batch; EvalPass cuts it with an eager slice (no tf.data op),
    and one pipeline serves every pass, also after a pass left early."""
    from rn50.task import ResNetTask
    trainer = _setup(ResNetTask, [*TINY, "--data_dir", digits_records, "--dali",
                                  "--batch_size", "5"], tmp_path)
    data = trainer.task.eval_dataset()
    assert isinstance(data, dali.EvalPass) and data.examples == 12  # 12 images, batches of 5
    first = [labels.numpy().tolist() for _, labels in data]
    assert [len(b) for b in first] == [5, 5, 2]
    next(iter(data))  # a pass left after one batch (the check before training)
    again = [labels.numpy().tolist() for _, labels in data]
    assert again == first


def test_the_trainer_copies_tfdata_batches_to_the_gpu_ahead_of_the_step(tmp_path, monkeypatch,
                                                                       digits_records):
    """P5: tf.data batches are prefetched to the GPU; DALI's and synthetic batches are not
    touched (they are there already)."""
    from rn50.task import ResNetTask
    trainer = _setup(ResNetTask, [*TINY, "--data_dir", digits_records], tmp_path)
    with _gpu_stand_in(monkeypatch, trainer):
        ds = trainer.ctx.capabilities.on_device(trainer.task.train_dataset())
        assert "copy_to_device" in repr(type(ds._input_dataset)).lower() or \
            "CopyToDevice" in type(ds._input_dataset).__name__
        synthetic = Repeated((tf.zeros([2]),))
        assert trainer.ctx.capabilities.on_device(synthetic) is synthetic


def test_synthetic_data_is_one_batch_made_once(tmp_path):
    """P5: synthetic data is one batch on the device, handed out again at every step."""
    from rn50.task import ResNetTask
    trainer = _setup(ResNetTask, [*TINY, "--mode", "training_benchmark", "--iter_unit",
                                  "batch"], tmp_path)
    data = trainer.task.train_dataset()
    a, b = next(iter(data)), next(iter(data))
    assert isinstance(data, Repeated) and a[0] is b[0]


def _graph_ops(concrete) -> list[str]:
    """Op types of a concrete function's graph and of every function it calls."""
    graph_def = concrete.graph.as_graph_def()
    types = [n.op for n in graph_def.node]
    for fn in graph_def.library.function:
        types += [n.op for n in fn.node_def]
    return types


def _step_graph(trainer):
    step = trainer.build_step()
    batch = next(iter(trainer.task.train_dataset()))
    concrete = step.get_concrete_function((batch,), trainer.initial_train_states())
    return step, concrete, batch


def test_on_a_gpu_the_step_skips_a_non_finite_update_on_the_device(tmp_path, monkeypatch):
    """P7: a TensorFlow cond on a predicate computed on the GPU makes the host wait for it every
    step. On a GPU the update, with its skip, is compiled by XLA: no control flow is left in the
    step's own graph, and the step computes what the CPU's does."""
    from rn50.task import ResNetTask
    args = [*TINY, "--mode", "training_benchmark", "--iter_unit", "batch", "--seed", "1"]
    cpu = _setup(ResNetTask, args, tmp_path / "cpu")
    _, concrete, batch = _step_graph(cpu)
    assert {"If", "StatelessIf"} & {op.type for op in concrete.graph.get_operations()}
    gpu = _setup(ResNetTask, args, tmp_path / "gpu")
    with _gpu_stand_in(monkeypatch, gpu):
        step, concrete, _ = _step_graph(gpu)
    outer = {op.type for op in concrete.graph.get_operations()}
    assert not {"If", "StatelessIf", "Switch", "Merge"} & outer
    assert step.update._jit_compile
    gpu.model.set_weights(cpu.model.get_weights())
    for trainer in (cpu, gpu):
        fn = trainer.build_step()
        for _ in range(2):
            fn((batch,), trainer.initial_train_states())
    for a, b in zip(cpu.model.get_weights(), gpu.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_one_finiteness_decision_per_step_under_loss_scaling(tmp_path):
    """P3: the trainer's decision is the loss-scale optimizer's too: a handful of IsFinite ops
    per step, not two checks of every gradient."""
    from rn50.task import ResNetTask
    trainer = _setup(ResNetTask, [*TINY, "--mode", "training_benchmark", "--iter_unit", "batch",
                                  "--amp", "--amp_dtype", "float16"], tmp_path)
    assert trainer.loss_scaled
    _, concrete, _ = _step_graph(trainer)
    ops = _graph_ops(concrete)
    assert ops.count("IsFinite") <= 2, ops.count("IsFinite")
    assert len(trainer.model.trainable_variables) > 20


def test_txl_lamb_is_fused_on_a_gpu(tmp_path, monkeypatch, corpus):
    """P3: Transformer-XL's LAMB updates every variable in one XLA computation on a GPU."""
    from txl.task import TransformerXLTask
    trainer = _setup(TransformerXLTask, [*TINY, "--data_dir", corpus], tmp_path)
    assert not trainer.inner_optimizer.fused
    with _gpu_stand_in(monkeypatch, trainer):
        assert trainer.task.build_optimizer(10, 10).fused


@pytest.mark.parametrize("local_rank, gpus, pinned", [(0, 8, 0), (5, 8, 5), (9, 8, 1),
                                                      (3, 1, 0)])
def test_each_process_is_pinned_to_one_gpu(monkeypatch, local_rank, gpus, pinned):
    """B3, M3: local rank modulo the GPUs seen, GPU 0 in a single process (local rank 0) or
    when each task sees only its own (srun --gpus-per-task=1)."""
    calls = {}
    fake = [f"GPU:{i}" for i in range(gpus)]
    monkeypatch.setattr(devices, "physical_gpus", lambda: fake)
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                        lambda g, on: calls.setdefault("growth", []).append(g))
    monkeypatch.setattr(tf.config, "set_visible_devices",
                        lambda g, kind: calls.setdefault("visible", []).append(g))
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda g: {"device_name": "NVIDIA A100"})
    with devices.standing_in(devices.CPU_ONLY):
        got = devices.pin(local_rank)
        assert devices.current().devices is got
    assert calls["visible"] == [f"GPU:{pinned}"] and calls["growth"] == fake
    assert got.gpu_index == got.dali_device_id == pinned and got.visible_gpus == gpus


@pytest.mark.parametrize("environ, world", [
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "16", "PMIX_RANK": "3"}, 16),  # srun pmix
    ({"SLURM_STEP_ID": "batch", "SLURM_NTASKS": "16", "SLURM_PROCID": "0"}, 0),  # sbatch script
    ({"SLURM_NTASKS": "16", "SLURM_PROCID": "0"}, 0),  # salloc shell
    ({"OMPI_COMM_WORLD_SIZE": "8", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}, 8),
    ({"HOROVOD_SIZE": "2"}, 2),
])
def test_launch_detection_takes_srun_steps_not_batch_scripts(environ, world):
    """B1: srun's PMIx plugin sets no *_SIZE variable; its step size comes from Slurm. A python
    started in the batch script itself (SLURM_NTASKS without a step) is one process."""
    assert distributed.launched_world_size(environ) == world


def test_machine_names_the_gpu_this_process_uses():
    assert devices.describe(Devices(3, "NVIDIA H100 80GB HBM3", 8)) == \
        "NVIDIA H100 80GB HBM3 (GPU 3 of 8)"
    assert devices.describe(devices.CPU_ONLY).endswith(", no GPU")


def test_checksums_are_not_read_again_when_the_index_directory_is_read_only(
        tmp_path, monkeypatch, digits_records):
    """P9: the stamp that a file's records passed their CRCs goes to the user's cache when the
    index directory cannot take it, so the next run skips the file."""
    from common.data import tfrecord_index
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = tfrecord_index.shard_files(digits_records, "validation", "t")
    blocker = tmp_path / "file"
    blocker.write_text("")
    ro = blocker / "idx"  # nothing can be written below a regular file, even by root
    reads = []
    real = tf.data.TFRecordDataset
    monkeypatch.setattr(tf.data, "TFRecordDataset", lambda p: reads.append(p) or real(p))
    assert tfrecord_index.verify_checksums(files, str(ro)) is None
    assert tfrecord_index.verify_checksums(files, str(ro)) is None
    assert reads == files  # once each
    assert len(os.listdir(tmp_path / "cache" / "tf-model-scripts" / "crc-ok")) == len(files)
