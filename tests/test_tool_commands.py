"""Every benchmark tool the docs quote runs to its end at a tiny size (``benchtools.peers``
crashed at its end, after five minutes of ResNet-50, with the table unprinted): ``ab`` and
``peers``' table here; ``peers`` itself (it installs keras-hub beside the stack) and
``int8_accuracy --smoke`` (training, export and calibration: minutes) in the slow suite. ``sweep``,
``report``, ``profile_diff`` and ``smoke`` run end to end in test_resnet.py, test_report.py,
test_profile.py and test_tool_faults.py, and test_gpu_smoke.py."""
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, TINY

pytestmark = pytest.mark.one_stack(
    "pip", "the tools run main.py as a user does; what they make of its logs does not change "
    "with the Python stack")

TINY_BENCH = ["--mode", "training_benchmark", *TINY, "--batch_size", "4",
              "--iter_unit", "batch", "--num_iter", "3", "--warmup_steps", "1"]


def _module(args, timeout=900, cwd=None):
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# `make test-slow` (the suite's time budget): the tools' runs of main.py and their tables are this
# file's other cases.
@pytest.mark.slow
def test_ab_compares_two_revisions_to_its_table(tmp_path):
    out = _module(["benchtools.ab", "--before", "HEAD", "--rounds", "1", "--json",
                   str(tmp_path / "ab.json"), "--", "resnet50v1.5/main.py", *TINY_BENCH])
    assert "round 1 after: train_throughput " in out  # NVIDIA's name for it
    assert "(medians of 1 alternating rounds)" in out.splitlines()[-1]
    result = json.loads((tmp_path / "ab.json").read_text())
    assert set(result["medians"]) == {"before", "after"}
    listed = subprocess.run(["git", "-C", ROOT, "worktree", "list"], capture_output=True,
                            text=True).stdout
    assert "ab_" not in listed  # its worktrees are removed


@pytest.mark.slow  # a minute or two each: training, export, calibration, ONNX Runtime
@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320"])
def test_int8_accuracy_runs_to_its_table(tmp_path, model):
    out = _module(["benchtools.int8_accuracy", model, "--smoke", "--workdir",
                   str(tmp_path / "w"), "--json", str(tmp_path / "r.json")])
    res = json.loads((tmp_path / "r.json").read_text())
    assert set(res["accuracy"]) == {"float32", "int8"}
    assert out.splitlines()[0].startswith(f"| {model} |")
    assert "INT8 calibrated on 16 training images" in out


def test_int8_accuracy_runs_the_models_main_py_to_train_then_export(tmp_path, monkeypatch):
    """The wiring of ``int8_accuracy`` in the default suite (its whole run is the slow test
    above): the design diet's rename of ``runs`` to ``main_py`` left it calling a method of the
    script's path, which only the slow run would have shown."""
    from benchtools import int8_accuracy
    from common import main_py
    calls = []
    monkeypatch.setattr(int8_accuracy, "_hooks", lambda model: type("H", (), {
        "int8_data": staticmethod(lambda data, smoke: ("/data", [*TINY]))}))
    monkeypatch.setattr(main_py, "run_main_py", lambda script, args, results: calls.append(
        (script, args[:2], results)) or [])
    records, out, recipe = int8_accuracy.export("resnet50v1.5", str(tmp_path), smoke=True)
    script = os.path.join(ROOT, "resnet50v1.5", "main.py")
    assert [c[:2] for c in calls] == [(script, ["--mode", "train"]),
                                      (script, ["--mode", "evaluate"])]
    assert (records, out, recipe) == ("/data", str(tmp_path / "export"), [*TINY])


def test_peers_table_names_the_machine_and_every_rate():
    """The end of ``benchtools.peers`` (its table) on the rates of two rounds."""
    from benchtools import peers
    rates = {("ours", "fp32"): [10.0, 12.0], ("peer", "fp32"): [8.0, 9.0],
             ("ours", "amp"): [20.0, 22.0], ("peer", "amp"): [12.0, 13.0]}
    table = peers.table("resnet50v1.5", rates, {"fp32": 4e11, "amp": 8e11},
                        {"ours": 4e9, "peer": 4e9}, 16, 16, "auto").splitlines()
    from common.runtime import devices
    assert table[0].startswith(devices.describe(devices.current().devices))
    assert table[1].startswith("| model | precision | batch | images/s (median of 2) |")
    assert table[3].startswith("| this repository | fp32 | 16 | 11.00 | 10.00, 12.00 |")
    assert "| 1.91x |" in table[4]  # ours' AMP speed-up: medians 21 / 11
    assert len(table) == 7


@pytest.mark.slow
def test_peers_runs_to_its_table():
    out = _module(["benchtools.peers", "resnet50v1.5", "--rounds", "1", "--steps", "2",
                   "--warmup", "1", "--batch_size", "2", "--peer_batch", "2", "--precisions",
                   "fp32"], timeout=3600)
    assert "| this repository | fp32 | 2 |" in out and "| keras.applications.ResNet50 |" in out


def test_benchmark_sh_sweeps_batch_sizes_and_precisions_to_one_table(tmp_path):
    """As NVIDIA's inference_benchmark.sh: every batch size and precision a main.py run of
    its own (through benchtools.sweep), one table; per-step latencies in an inference
    benchmark."""
    proc = subprocess.run(
        ["bash", f"{ROOT}/resnet50v1.5/scripts/benchmark.sh", "inference", "fp32", "1", "noxla",
         "--arch", "resnet_tiny", "--num_classes", "10", "--image_size", "32"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHON": sys.executable, "BATCH_SIZES": "2,4",
             "NUM_ITER": "4", "WARMUP_STEPS": "1", "RESULTS_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| fp32 |")]
    assert [r.split(" | ")[2] for r in rows] == ["2", "4"], proc.stdout
    assert all(r.split(" | ")[-2] != "-" for r in rows)  # latency p50: timed per step
    from common.runtime.dllogger import read_records
    (params,) = [r["data"] for r in read_records(str(tmp_path / "inference_benchmark" /
                                                     "fp32_bs4_gpu1" / "log.json"))
                 if r.get("step") == "PARAMETER"]
    assert params["batch_size"] == 4 and params["num_iter"] == 4 and params["warmup_steps"] == 1
