"""What a user sees on the console: no start-up line that reads as a fault on a healthy machine
(and nothing real hidden), ``--help`` without TensorFlow, and throughput figures that say what
they include."""
import os
import subprocess
import sys

import pytest
from conftest import OWN_HANDLING, ROOT, TINY, run_cli

from common import runner
from common.runtime import quiet_start
from rn50.task import ResNetTask

MAINS = {"resnet50v1.5": "--arch", "ssd320": "--backbone_checkpoint",
         "transformerxl": "--n_layer"}

CPU_START = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795630746.819751    7393 port.cc:153] oneDNN custom operations are on. You may "
    "see slightly different numerical results due to floating-point round-off errors.\n",
    "I0000 00:00:1795630746.820114    7393 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n",
    "E0000 00:00:1795630750.752922    7393 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n",
    # TensorFlow 2.17's own form (NGC 25.02).
    "2026-11-25 18:25:12.342613: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:485] "
    "Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when one "
    "has already been registered\n",
    "2026-11-25 18:25:13.440041: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT "
    "Warning: Could not find TensorRT\n",
]


def test_start_up_lines_are_dropped_on_a_machine_without_a_driver_and_kept_with_one():
    real = "E0000 00:00:1.0 1 gpu_device.cc:2] Cannot dlopen some GPU libraries.\n"
    assert quiet_start.kept(CPU_START + [real], driver=False) == [real]
    # With a driver, "no driver" and a failed cuInit are faults: they are shown.
    assert quiet_start.kept(CPU_START, driver=True) == CPU_START[2:4]


@OWN_HANDLING
def test_filtered_stderr_replays_everything_else_in_order_even_on_an_exception(tmp_path):
    """Lines written by C++ (descriptor 2) and by Python (sys.stderr) inside the block."""
    code = (
        "import os, sys\n"
        "from common.runtime import quiet_start\n"
        "try:\n"
        "    with quiet_start.filtered_stderr():\n"
        f"        os.write(2, {CPU_START[0]!r}.encode())\n"
        "        os.write(2, b'E0000 real error from C++\\n')\n"
        "        print('python warning', file=sys.stderr)\n"
        f"        os.write(2, {CPU_START[1]!r}.encode())\n"
        "        raise RuntimeError('boom')\n"
        "except RuntimeError:\n"
        "    print('after', file=sys.stderr)\n")
    proc = run_cli([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["E0000 real error from C++", "python warning", "after"]


@OWN_HANDLING
def test_a_start_up_that_hangs_shows_its_lines_after_a_bound(tmp_path):
    """A start-up that hangs (a lock, a driver, NCCL on a cluster) and is then killed showed
    nothing: the held lines reach the console within QUIET_START_HOLD_S, filtered, and so do
    later ones: a start-up slower than the bound (a loaded machine) still keeps its benign lines
    off the console (they came through once the bound had passed)."""
    code = ("import os, sys, time\nfrom common.runtime import quiet_start\n"
            "with quiet_start.filtered_stderr():\n"
            f"    os.write(2, {CPU_START[0]!r}.encode())\n"
            "    os.write(2, b'E0000 waiting for the driver\\n')\n"
            "    time.sleep(1.5)\n"
            f"    os.write(2, {CPU_START[1]!r}.encode())\n"
            "    os.write(2, b'E0000 still waiting\\n')\n"
            "    sys.stderr.flush()\n"
            "    time.sleep(1.5)\n"
            "    os.kill(os.getpid(), 9)\n")
    proc = run_cli([sys.executable, "-c", code], timeout=60, env={"QUIET_START_HOLD_S": "0.5"})
    assert proc.returncode == -9
    assert proc.stderr.splitlines() == ["E0000 waiting for the driver", "E0000 still waiting"]


@OWN_HANDLING
def test_a_process_that_dies_while_filtered_says_so_on_the_real_stderr():
    """TensorFlow aborts on a CPU without the instructions it was built for: what it wrote is
    caught, but the fatal signal and where it struck reach the console."""
    code = ("import os\nfrom common.runtime import quiet_start\n"
            "with quiet_start.filtered_stderr():\n"
            "    os.write(2, b'The TensorFlow library was compiled to use AVX instructions\\n')\n"
            "    os.abort()\n")
    proc = run_cli([sys.executable, "-c", code], timeout=60)
    assert proc.returncode != 0
    assert "Fatal Python error: Aborted" in proc.stderr and "<string>" in proc.stderr


@OWN_HANDLING
def test_a_stop_signal_swallowed_by_an_import_still_says_so_on_the_console():
    """A stop signal that lands in a ``__del__`` or weakref callback while TensorFlow imports
    reaches ``sys.unraisablehook``, which ends the process with os._exit: its one line used to
    stay in the held stderr, so that one rank of a job stopped while starting said nothing."""
    code = ("import gc, os, sys\nfrom common import versions\n"
            "from common.runtime import graceful_stop, quiet_start\n"
            "versions.quiet_interrupts('main.py')\n"
            "class Importing:\n"
            "    def __del__(self):\n"
            "        raise graceful_stop.Interrupted('SIGUSR1')\n"
            "with quiet_start.filtered_stderr():\n"
            "    os.write(2, b'E0000 held while starting\\n')\n"
            "    Importing()\n"
            "    gc.collect()\n"
            "print('went on', file=sys.stderr)\n")
    proc = run_cli([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "E0000 held while starting",
        "main.py: SIGUSR1 while starting: stopped before anything was written"], proc.stderr


@OWN_HANDLING
@pytest.mark.parametrize("model", list(MAINS))
def test_help_lists_the_flags_without_importing_tensorflow(tmp_path, model):
    """A tensorflow package that fails to import comes first on the path: --help must not
    need it."""
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('--help imported tensorflow')\n")
    proc = run_cli([sys.executable, os.path.join(ROOT, model, "main.py"), "--help"],
                   env={"PYTHONPATH": str(tmp_path)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: main.py") and proc.stderr == ""
    assert "--batch_size" in proc.stdout and MAINS[model] in proc.stdout


@OWN_HANDLING
def test_the_config_modules_name_the_models_architectures():
    from rn50 import config as rn50_config
    from rn50.model import ARCHS as RN50_ARCHS
    from ssd import config as ssd_config
    from ssd.model import ARCHS as SSD_ARCHS
    assert tuple(RN50_ARCHS) == rn50_config.ARCH_NAMES
    assert tuple(SSD_ARCHS) == ssd_config.ARCH_NAMES


@pytest.mark.both_stacks
def test_a_healthy_run_writes_nothing_on_stderr_and_says_what_it_ran_on(tmp_path):
    """On this CPU machine (no NVIDIA driver): TensorFlow's start-up lines are gone, the run's
    own device line is there. A run no longer than its warm-up says that its throughput
    includes compilation."""
    proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), "--mode",
                    "train", *TINY, "--iter_unit", "batch", "--num_iter", "2", "--warmup_steps",
                    "5", "--results_dir", str(tmp_path)],
                   # Filtered however long a loaded machine's start-up takes (past
                   # HOLD_SECONDS they are shown, filtered, as they come).
                   env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert proc.returncode == 0, proc.stderr
    if quiet_start.nvidia_driver_present():
        pytest.skip("this machine has an NVIDIA driver: its start-up lines are shown")
    assert proc.stderr == ""
    assert "device: " in proc.stdout and "no GPU" in proc.stdout
    assert ("train_throughput includes start-up and compilation: the run has no more steps "
            "than --warmup_steps (5)") in proc.stdout


@OWN_HANDLING
def test_profiled_steps_are_left_out_of_the_benchmark_and_training_throughput(tmp_path):
    common = ["main.py", *TINY, "--iter_unit", "batch", "--warmup_steps", "1",
              "--display_every", "100"]
    bench = runner.run(ResNetTask, common + ["--mode", "training_benchmark", "--num_iter", "8",
                                             "--profile", "4:5", "--results_dir",
                                             str(tmp_path / "bench")])
    assert bench["timed_steps"] == 5  # steps 2..8 but the profiled 4 and 5
    assert bench["throughput_excludes_profiled_steps"] == "4:5" and bench["profiled_steps"] == 2
    train = runner.run(ResNetTask, common + ["--mode", "train", "--num_iter", "6", "--profile",
                                             "1:1", "--results_dir", str(tmp_path / "warm")])
    assert "throughput_excludes_profiled_steps" not in train  # profiled inside the warm-up
    train = runner.run(ResNetTask, common + ["--mode", "train", "--num_iter", "6", "--profile",
                                             "3:4", "--results_dir", str(tmp_path / "train")])
    assert train["throughput_excludes_profiled_steps"] == "3:4"
    assert train["train_throughput"] > 0


@OWN_HANDLING
def test_a_profile_over_every_timed_benchmark_step_is_refused(tmp_path):
    with pytest.raises(runner.UsageError, match=r"--profile 2:9 covers every timed step "
                                                r"\(2\.\.8\)"):
        runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark", "--iter_unit",
                                "batch", "--num_iter", "8", "--warmup_steps", "1", "--profile",
                                "2:9", "--results_dir", str(tmp_path)])


@OWN_HANDLING
def test_a_profile_without_xprof_is_refused_before_the_run(tmp_path, monkeypatch):
    """xprof (the "profile" extra) is not in every install: --profile without it is one line
    naming the extra, before anything runs."""
    import importlib.util
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "xprof" else find(name, *a, **k))
    with pytest.raises(runner.UsageError, match=r"^--profile tabulates the traced ops with "
                       r"xprof, which is not installed: pip install 'tf-model-scripts\[profile\]'"):
        runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark", "--iter_unit",
                                "batch", "--num_iter", "4", "--profile", "2:3", "--results_dir",
                                str(tmp_path)])
    assert not os.listdir(tmp_path)  # nothing ran


@OWN_HANDLING
def test_prepare_dataset_help_is_quiet():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ssd320", "prepare_dataset.py"),
                           "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert proc.returncode == 0 and "usage:" in proc.stdout
    if not quiet_start.nvidia_driver_present():
        assert proc.stderr == ""
