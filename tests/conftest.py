"""Shared fixtures: the repository's paths, a real tiny dataset, a CLI runner."""
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys

import durations
import pytest

from common.models import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tests send SIGINT as a terminal's Ctrl-C would. A suite started in the background of a
# script (`make test &`, nohup) inherits SIGINT ignored, which every process it starts would keep
# (a shell cannot trap it, Python installs no handler): restore it, as a terminal has it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
RN50 = os.path.join(ROOT, "resnet50v1.5")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Tiny ResNet settings used by the end-to-end tests (rn50/config.py's PRESETS["tiny"]: the tiny
# network at 32x32, 10 classes on synthetic data): same code paths, seconds per run.
TINY = ["--preset", "tiny"]

# What the NGC suite leaves to the pip suite (docs/testing.md, "Two stacks"): a test whose
# assertions are this repository's own decisions. The stack's part of its path (TensorFlow's
# reading, training and saving on the way) is asserted by other tests in both suites.
OWN_HANDLING = pytest.mark.one_stack(
    "pip", "what it asserts is this repository's own handling (its messages, files, flags, "
    "signals), the same on both stacks; the stack's part of its path is tested in both suites")

# The stack check (docs/testing.md, "Two stacks"): what the NGC suite runs. Each model's
# numbers, every mode end to end, AMP, XLA, the exports, imports, Horovod and DALI as built
# against that stack's TensorFlow, the stack's own checks; a test not marked runs in the pip
# suite only.
BOTH_STACKS = pytest.mark.both_stacks


def pytest_collection_modifyitems(config, items):
    """The slowest files first (tests/durations.py says why), then the stack's selection
    (``TEST_STACK``, which the Makefile sets: pip for ``make test``, ngc for ``make test-ngc``):
    the NGC suite runs the tests marked ``both_stacks``; ``one_stack(stack, why)`` keeps a
    test out of the other stack's suite, saying where it runs."""
    stack = os.environ.get("TEST_STACK")
    items[:] = durations.longest_first(items, durations.load(stack))
    if not stack:
        return
    for item in items:
        mark = item.get_closest_marker("one_stack")
        if mark and mark.args[0] != stack:
            item.add_marker(pytest.mark.skip(
                reason=f"runs in the {mark.args[0]} stack's suite only: {mark.args[1]}"))
        elif stack == "ngc" and not mark and not item.get_closest_marker("both_stacks"):
            item.add_marker(pytest.mark.skip(
                reason="runs in the pip stack's suite only: the NGC suite is the stack check "
                       "(tests marked both_stacks, docs/testing.md)"))


def pytest_configure(config):
    """This checkout's modules compiled once, before the tests start their processes: where
    ``PYTHONDONTWRITEBYTECODE`` is set (the machines this project is built on set it), every
    main.py the suite starts compiled each module it imports from its source again. Python
    reads the compiled files whatever that variable says. Once, in the process that hands the
    tests to the workers."""
    if hasattr(config, "workerinput"):
        return
    import compileall
    for package in ("common", "benchtools", *(m.directory for m in MODELS.values())):
        compileall.compile_dir(os.path.join(ROOT, package), quiet=2)


def pytest_collection_finish(session):
    """The test modules' imports (TensorFlow's, Keras') frozen out of the garbage collector's
    walks, as every main.py does (``common.runtime.start_policy.settle_imports``): the
    in-process tests' full collections skip them."""
    import gc
    gc.freeze()


def pytest_addoption(parser):
    parser.addoption("--keep_runs", metavar="DIR",
                     help="the learning checks (-m slow) keep their runs in DIR/MODEL, for "
                          "python -m benchtools.report")


@pytest.fixture
def learning_runs(request, tmp_path):
    """Where a learning check puts its runs: --keep_runs DIR/MODEL, else a temporary dir."""
    def where(model: str) -> str:
        keep = request.config.getoption("keep_runs")
        return os.path.join(os.path.abspath(keep), model) if keep else str(tmp_path / model)
    return where


@pytest.fixture(autouse=True)
def _process_state_restored():
    """Each test leaves the process as it found it: the Keras dtype policy, TF32, Grappler's AMP
    rewrite and the random states that ``runner.setup`` sets for the whole process (tests that
    set up a trainer in this process would otherwise hand, say, a float16 policy to the next
    test of their worker, whichever it is)."""
    if "keras" not in sys.modules:
        yield
        if "keras" in sys.modules:  # the test imported it: its default policy is float32
            sys.modules["keras"].mixed_precision.set_dtype_policy("float32")
        return
    from common import runner
    with runner.process_state_restored():
        yield


@contextlib.contextmanager
def dtype_policy(name: str):
    """Keras' global dtype policy set to ``name`` inside the block, float32 again after it."""
    import keras
    keras.mixed_precision.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def load_script(model_dir: str, name: str):
    """A model's ``scripts/NAME.py`` as a module of its own name (``resnet50v1.5`` ->
    ``resnet50v1_5_NAME``): every model has a learning_check.py, and one import name for all
    of them would give every test the first one imported."""
    path = os.path.join(ROOT, model_dir, "scripts", f"{name}.py")
    module_name = f"{model_dir.replace('.', '_')}_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def setup_py():
    """The repository's setup.py read as a module (its ``setup()`` runs only as a script): the
    wheel's ``TOP_LEVEL`` packages (name -> folder), ``PACKAGES`` and console ``SCRIPTS``, all
    derived from ``common/models.py``."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_setup_py", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tracked_files() -> list[str]:
    """The checkout's own files, relative to ROOT: git's list, or where there is no git (the
    Docker image leaves .git out) every file but builds, runs and caches."""
    proc = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.splitlines()
    skip = {".git", "build", "results", "demo_data", "__pycache__", ".pytest_cache", ".cache"}
    out = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in skip and not x.endswith(".egg-info")]
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in names]
    return sorted(out)


def run_cli(args, timeout=300, env=None, **kw):
    """Runs a command line; returns the CompletedProcess (text)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env, **kw)


def step_losses(records) -> list[float]:
    """Each logged training step's loss, under the run's model's name for it (NVIDIA's:
    ``total_loss``, ``train_loss``; common/runtime/log_names.py)."""
    from common import models
    from common.runtime.dllogger import step_logs
    model = next((r["data"].get("model") for r in records if r.get("step") == "PARAMETER"), "")
    loss = models.log_names(model).loss
    return [r["data"][loss] for r in step_logs(records) if loss in r["data"]]


def stderr_last_line(proc) -> str:
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="session")
def digits_records(tmp_path_factory):
    """60 real digit images (48 train / 12 val) as ImageNet-layout TFRecords with indexes."""
    from rn50 import digits
    return digits.prepare(str(tmp_path_factory.mktemp("digits")), limit=60, train_shards=3)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A prepared corpus of simple generated sentences (about 6,000 train tokens)."""
    import numpy as np
    root = tmp_path_factory.mktemp("txl_corpus")
    rng = np.random.default_rng(0)
    subjects = "the king | a fool | my lord | the queen | her brother | this ghost".split(" | ")
    verbs = "sees | loves | fears | speaks to | follows | waits for".split(" | ")
    objects = "the night | his sword | the castle | a letter | our friend | the sea".split(" | ")

    def text(lines):
        return "".join(" " + " ".join(f"{rng.choice(subjects)} {rng.choice(verbs)} "
                                      f"{rng.choice(objects)} ." for _ in range(3)) + " \n"
                       for _ in range(lines))
    for split, lines in (("train", 450), ("valid", 40), ("test", 40)):
        (root / f"{split}.txt").write_text(text(lines))
    proc = run_cli([sys.executable, os.path.join(ROOT, "transformerxl", "prepare_dataset.py"),
                    str(root), str(root / "prepared")])
    assert proc.returncode == 0, proc.stderr
    return str(root / "prepared")


@pytest.fixture(scope="session")
def shapes_records(tmp_path_factory):
    """24 train / 8 val generated images in COCO's layout (``coco/`` beside it), prepared by
    prepare_dataset."""
    from ssd import shapes
    return shapes.prepare(str(tmp_path_factory.mktemp("shapes")), train=24, val=8, seed=3,
                          train_shards=2)


def same_detections(a, b):
    """Each image's detections alike up to order: two scores 1e-6 apart may swap places.
    ``num_detections`` is float32, as TF Object Detection API's (a count, read as one)."""
    import numpy as np
    for i, n in enumerate(b["num_detections"]):
        n = int(np.squeeze(n))
        rows = [np.concatenate([d["detection_boxes"][i, :n], d["detection_scores"][i, :n, None],
                                d["detection_classes"][i, :n, None]], axis=1) for d in (a, b)]
        for row in rows[0]:
            close = np.all(np.abs(rows[1] - row) <= [1e-4] * 4 + [1e-5, 0], axis=1)
            assert close.any(), (i, row)


def photographs() -> list[str]:
    """JPEG photographs that packages ship: scikit-learn's two, matplotlib's Grace Hopper."""
    import matplotlib
    import sklearn.datasets
    here = os.path.join(os.path.dirname(sklearn.datasets.__file__), "images")
    return [os.path.join(here, "china.jpg"), os.path.join(here, "flower.jpg"),
            os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg")]


def distinct_ssd_scores(model, images) -> None:
    """Untrained SSD scores sit within 1e-3 of each other, and which of two near-tied boxes NMS
    keeps turns on rounding (TensorFlow's NMS against ONNX Runtime's): a random class head whose
    logits on ``images`` have a standard deviation of 2 gives every anchor a score of its own."""
    import tensorflow as tf
    kernel, bias = (next(v for v in model.variables if v.path == f"class_head/{name}")
                    for name in ("kernel", "bias"))
    kernel.assign(tf.random.stateless_normal(kernel.shape, (1, 2)))
    bias.assign(tf.zeros_like(bias))
    logits = model(images, training=False)["cls_logits"]
    kernel.assign(kernel * 2.0 / tf.math.reduce_std(logits))


def _distinct_scores(trainer):
    import tensorflow as tf
    size = trainer.flags.image_size
    distinct_ssd_scores(trainer.model, tf.random.stateless_normal([2, size, size, 3], (3, 4)))


# The serving tests' exports, each written once for the run (triton_servers.shared_export): the
# trainer set up here, the export and its Triton repositories (the image models' ONNX).
@pytest.fixture(scope="session")
def exported_resnet(tmp_path_factory, digits_records):
    from triton_servers import shared_export

    from rn50.task import ResNetTask
    return shared_export(tmp_path_factory, ResNetTask, [*TINY, "--data_dir", digits_records])


@pytest.fixture(scope="session")
def exported_ssd(tmp_path_factory, shapes_records):
    from triton_servers import shared_export

    from ssd.task import SSDTask
    return shared_export(tmp_path_factory, SSDTask, [*TINY, "--data_dir", shapes_records],
                         weights=_distinct_scores)


@pytest.fixture(scope="session")
def exported_txl(tmp_path_factory, corpus):
    from triton_servers import shared_export

    from txl.task import TransformerXLTask
    # With model.onnx: triton/ runs it (without, cpu/'s model: test_triton_repository).
    return shared_export(tmp_path_factory, TransformerXLTask, [*TINY, "--data_dir", corpus],
                         export_args=["--export_onnx"])


@pytest.fixture(scope="session")
def triton_python():
    """scripts/triton_env.sh's python (tritonclient, PyTriton; made at first use)."""
    from triton_servers import triton_env_python
    return triton_env_python()
