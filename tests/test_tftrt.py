"""--use_tftrt: refused with one line where TensorFlow has no TensorRT (every stack this CPU
can run); elsewhere the SavedModel goes through TF-TRT's converter. Here a stand-in for the
converter records the call and keeps the graph, so everything around TensorRT runs for real:
the export, the signature and its arguments, the engines' example shapes, the timed calls."""
import os
import shutil
import sys
import types

import pytest
from conftest import RN50, TINY, run_cli, stderr_last_line

from common import runner
from common.core import tftrt
from rn50.task import ResNetTask
from txl.task import TransformerXLTask

MAIN = os.path.join(RN50, "main.py")


class RecordingConverter:
    calls = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def convert(self):
        pass

    def build(self, input_fn):
        self.examples = list(input_fn())

    def save(self, out_dir):  # the graph as it was: what TensorRT would replace is its business
        shutil.copytree(self.kwargs["input_saved_model_dir"], out_dir, dirs_exist_ok=True)
        RecordingConverter.calls.append(self)


@pytest.fixture
def fake_tensorrt(monkeypatch):
    RecordingConverter.calls = []
    monkeypatch.setattr(tftrt, "available", lambda: True)
    monkeypatch.setattr(tftrt, "_trt_convert",
                        lambda: types.SimpleNamespace(TrtGraphConverterV2=RecordingConverter))
    return RecordingConverter.calls


def test_use_tftrt_is_refused_without_tensorrt(tmp_path):
    if tftrt.available():  # pip TensorFlow has no TensorRT; the 2.17 replica cannot load it
        pytest.skip("this TensorFlow runs TF-TRT (an NGC container with a GPU)")
    proc = run_cli([sys.executable, MAIN, *TINY, "--mode", "inference_benchmark", "--iter_unit",
                    "batch", "--num_iter", "3", "--warmup_steps", "1", "--use_tftrt", "FP16",
                    "--results_dir", str(tmp_path)])
    assert proc.returncode == 2
    line = stderr_last_line(proc)
    assert line.startswith("main.py: error: --use_tftrt FP16: this TensorFlow ")
    assert "was built without TensorRT" in line and "trtexec" in line
    assert not (tmp_path / "tftrt").exists()  # refused before anything ran


def test_use_tftrt_only_in_the_inference_benchmark(fake_tensorrt, tmp_path):
    with pytest.raises(runner.UsageError, match="applies to --mode inference_benchmark, not "
                                                "train"):
        runner.run(ResNetTask, ["main.py", *TINY, "--mode", "train", "--use_tftrt", "FP32",
                                "--results_dir", str(tmp_path)])


def test_resnet_tftrt_benchmark_converts_the_serving_signature(fake_tensorrt, tmp_path):
    s = runner.run(ResNetTask, ["main.py", *TINY, "--mode", "inference_benchmark",
                                "--iter_unit", "batch", "--num_iter", "4", "--warmup_steps", "1",
                                "--use_tftrt", "FP16", "--results_dir", str(tmp_path)])
    (conv,) = fake_tensorrt
    assert conv.kwargs["precision_mode"] == "FP16"
    assert conv.kwargs["input_saved_model_dir"] == str(tmp_path / "tftrt" / "saved_model")
    assert conv.kwargs["input_saved_model_signature_key"] == "preprocessed"  # float images
    assert conv.kwargs["use_dynamic_shape"] is True
    ((example,),) = [list(e.values()) for e in conv.examples]
    assert tuple(example.shape) == (8, 32, 32, 3)  # engines built for the benchmark's batch
    assert (tmp_path / "tftrt" / "converted" / "saved_model.pb").exists()
    assert s["timed_steps"] == 3 and s["eval_throughput"] > 0


def test_txl_tftrt_benchmark_scores_with_a_memory_of_eval_mem_len(fake_tensorrt, tmp_path,
                                                                  corpus):
    s = runner.run(TransformerXLTask, [
        "main.py", *TINY, "--seed", "3", "--data_dir", corpus, "--mode",
        "inference_benchmark", "--iter_unit", "batch", "--num_iter", "3", "--warmup_steps", "1",
        "--use_tftrt", "FP32", "--results_dir", str(tmp_path)])
    (conv,) = fake_tensorrt
    assert conv.kwargs["input_saved_model_signature_key"] == "score"
    (example,) = conv.examples
    assert sorted(example) == ["mems", "targets", "tokens"]
    layers, rows, mem_len, _ = example["mems"].shape
    assert rows == example["tokens"].shape[0] and mem_len > 0 and layers > 0
    assert s["timed_steps"] == 2 and s["eval_avg_throughput"] > 0
