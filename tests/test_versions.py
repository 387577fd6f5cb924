"""The stack check every main.py and prepare_dataset.py makes before any model code runs."""
import os
import shutil
import sys

import pytest
from conftest import ROOT, run_cli, stderr_last_line

from common import versions

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


@pytest.mark.parametrize("text,parsed", [("2.17.0+nv25.02", (2, 17, 0)), ("3.15.1rc0", (3, 15, 1)),
                                         ("1.26.4", (1, 26, 4)), ("none", ())])
def test_parse_keeps_the_release_numbers(text, parsed):
    assert versions.parse(text) == parsed


def _stack(monkeypatch, **found):
    monkeypatch.setattr(versions, "installed", lambda package: found.get(package))


def test_the_tested_stacks_pass(monkeypatch):
    _stack(monkeypatch, numpy="1.26.4", tensorflow="2.17.0", keras="3.15.1")
    assert versions.problems() == []
    _stack(monkeypatch, numpy="2.4.6", tensorflow="2.21.0", keras="3.15.1")
    assert versions.problems() == []


def test_ngc_keras_is_named_with_the_version_needed_and_the_fix(monkeypatch):
    _stack(monkeypatch, numpy="1.26.4", tensorflow="2.17.0", keras="3.3.2")
    (line,) = versions.problems()
    assert line.startswith("keras 3.3.2 is installed; these scripts need keras >= 3.15")
    assert "scripts/install_deps.sh" in line and "keras==3.15.1" in line


def test_numpy2_under_a_tensorflow_built_for_numpy1_is_named(monkeypatch):
    _stack(monkeypatch, numpy="2.0.1", tensorflow="2.17.0", keras="3.15.1")
    (line,) = versions.problems()
    assert "numpy 2.0.1" in line and "tensorflow 2.17.0" in line and "numpy<2" in line


def test_a_missing_package_and_an_import_failure_are_one_line_each(monkeypatch):
    def installed(package):
        if package == "tensorflow":
            raise ImportError("numpy.core.multiarray failed to import\nmore detail")
        return {"numpy": "1.26.4"}.get(package)
    monkeypatch.setattr(versions, "installed", installed)
    lines = versions.problems()
    assert lines[0].startswith("tensorflow fails to import (ImportError: numpy.core.multiarray")
    assert lines[1].startswith("keras is not installed")
    assert all("\n" not in ln for ln in lines)


def test_the_pins_are_what_install_deps_installs():
    proc = run_cli([sys.executable, "-m", "common.versions", "--pin", "keras"], cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == versions.REQUIREMENTS[2].pin
    proc = run_cli([sys.executable, "-m", "common.versions", "--satisfied", "keras"], cwd=ROOT)
    assert proc.returncode == 0  # this stack's Keras passed install_deps.sh


@pytest.mark.parametrize("script", ["resnet50v1.5/main.py", "ssd320/main.py",
                                    "transformerxl/main.py", "transformerxl/prepare_dataset.py"])
def test_main_under_an_old_keras_stops_with_one_line(tmp_path, script):
    # A Keras that reports NGC 25.02's version, ahead of the real one on the import path.
    fake = tmp_path / "keras"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "3.3.2"\n')
    proc = run_cli([sys.executable, os.path.join(ROOT, script), "--mode", "train"],
                   env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    name = os.path.basename(script)
    assert stderr_last_line(proc).startswith(
        f"{name}: error: keras 3.3.2 is installed; these scripts need keras >= 3.15"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_main_without_its_dependencies_says_how_to_install_them():
    # -S: no site-packages (no TensorFlow, no numpy); the script still finds its own checkout.
    proc = run_cli([sys.executable, "-S", os.path.join(ROOT, "ssd320", "main.py")])
    assert proc.returncode == 2, proc.stderr
    assert stderr_last_line(proc) == (
        "main.py: error: numpy is not installed; these scripts need numpy >= 1.26: run "
        "'bash scripts/install_deps.sh' (it changes nothing that TensorFlow was built against)")


def test_scripts_import_every_model_package_from_their_own_checkout():
    """SSD320 builds its trunk from rn50: with the editable install naming a clone since deleted
    (its finder gone here), ssd320/main.py stopped with "No module named 'rn50'", and with one
    naming another clone it ran that clone's rn50. The entry puts this checkout's model folders
    first, for main.py and for ``python -m benchtools.X`` alike."""
    probe = ("import sys\n"
             "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]\n"
             "sys.path[:] = [p for p in sys.path if p not in ('', {root!r})]\n"
             "import runpy\n"
             "runpy.run_path({entry!r})['own_checkout_first']()\n"
             "import rn50, ssd, txl\n"
             "print(rn50.__file__, ssd.__file__, txl.__file__)\n")
    proc = run_cli([sys.executable, "-c", probe.format(
        root=ROOT, entry=os.path.join(ROOT, "common", "entry.py"))], cwd="/",
        env={"PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [os.path.join(ROOT, d, p, "__init__.py") for d, p in (
        ("resnet50v1.5", "rn50"), ("ssd320", "ssd"), ("transformerxl", "txl"))]
    # Without it, the same process finds none of them: the probe is not vacuous.
    bare = probe.replace("runpy.run_path({entry!r})['own_checkout_first']()\n", "")
    proc = run_cli([sys.executable, "-c", bare.format(root=ROOT)], cwd="/", env={"PYTHONPATH": ""})
    assert proc.returncode == 1 and "No module named 'rn50'" in proc.stderr


def test_the_target_runs_with_tensorflows_modules_out_of_the_collectors_walks():
    """The entry freezes what the start-up imported (``settle_imports``): the target, here
    ``gc.get_freeze_count`` itself, finds TensorFlow's and Keras' objects frozen, where a bare
    ``import tensorflow`` leaves them to the collector."""
    entry = os.path.join(ROOT, "common", "entry.py")
    probe = ("import runpy, sys\n"
             "print(runpy.run_path({entry!r})['run'](sys.argv[0], 'gc:get_freeze_count'))\n")
    proc = run_cli([sys.executable, "-c", probe.format(entry=entry)])
    assert proc.returncode == 0, proc.stderr
    bare = run_cli([sys.executable, "-c", "import gc, tensorflow; print(gc.get_freeze_count())"])
    assert int(proc.stdout.split()[-1]) > int(bare.stdout.split()[-1]) + 100_000


def test_the_start_leaves_kerass_optional_packages_unimported_and_importable():
    """Keras imports scikit-learn, matplotlib and IPython at its own import when they are
    installed; a main.py's start keeps them out (``without_optional_imports``): its target finds
    TensorFlow imported and them not, and imports them when it needs them (the digits dataset,
    the drawings)."""
    entry = os.path.join(ROOT, "common", "entry.py")
    probe = ("import runpy, sys, types\n"
             "probe = types.ModuleType('probe')\n"
             "def where():\n"
             "    seen = sorted(m for m in ('sklearn', 'matplotlib', 'IPython')\n"
             "                  if m in sys.modules)\n"
             "    import matplotlib.pyplot, sklearn.datasets\n"
             "    print('tensorflow' in sys.modules, seen, 'imported after')\n"
             "    return 0\n"
             "probe.where = where\n"
             "sys.modules['probe'] = probe\n"
             "sys.exit(runpy.run_path({entry!r})['run'](sys.argv[0], 'probe:where'))\n")
    proc = run_cli([sys.executable, "-c", probe.format(entry=entry)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "True [] imported after"
    # Without the entry, TensorFlow's import brings scikit-learn in: the probe is not vacuous.
    bare = run_cli([sys.executable, "-c",
                    "import sys, tensorflow; print('sklearn' in sys.modules)"])
    assert bare.stdout.split()[-1] == "True"


@pytest.mark.parametrize("full_keras", [False, True])
def test_the_start_policys_keras_consequence_and_its_opt_out(full_keras):
    """What keeping Keras' optional packages out of its import costs (``start_policy``'s
    docstring, the README): Keras recorded scikit-learn and matplotlib as missing, so its
    scikit-learn wrapper and image gallery refuse, although both are installed and import;
    with ``TF_MODEL_SCRIPTS_FULL_KERAS=1`` they work. A Keras that needed them at its import
    would fail here first."""
    entry = os.path.join(ROOT, "common", "entry.py")
    probe = ("import runpy, sys, types\n"
             "probe = types.ModuleType('probe')\n"
             "def where():\n"
             "    import keras, numpy as np\n"
             "    import sklearn, matplotlib  # installed: these import\n"
             "    for name, call in (\n"
             "            ('wrapper', lambda: keras.wrappers.SKLearnClassifier(\n"
             "                model=lambda X, y: keras.Sequential([keras.layers.Dense(2)]))),\n"
             "            ('gallery', lambda: keras.visualization.plot_image_gallery(\n"
             "                np.zeros((1, 8, 8, 3), 'uint8'), value_range=(0, 255)))):\n"
             "        try:\n"
             "            call()\n"
             "            print(name, 'works')\n"
             "        except ImportError as e:\n"
             "            print(name, 'refused:', str(e).split('.')[0])\n"
             "    return 0\n"
             "probe.where = where\n"
             "sys.modules['probe'] = probe\n"
             "sys.exit(runpy.run_path({entry!r})['run'](sys.argv[0], 'probe:where'))\n")
    env = {"MPLBACKEND": "Agg", **({"TF_MODEL_SCRIPTS_FULL_KERAS": "1"} if full_keras else {})}
    proc = run_cli([sys.executable, "-c", probe.format(entry=entry)], env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()[-2:]
    assert lines == (["wrapper works", "gallery works"] if full_keras else [
        "wrapper refused: SKLearnClassifier requires `scikit-learn` to be installed",
        "gallery refused: The `plot_image_gallery` function requires the `matplotlib` "
        "package"]), proc.stdout[-2000:]


def test_two_clones_side_by_side_each_run_their_own_code(tmp_path):
    """A second clone beside this one (which the environment's editable install points at)
    runs its own common/ and models, and its tests import its own code: nothing to reinstall
    or move. The clone here differs in one fact, the Keras it requires."""
    clone = tmp_path / "clone"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(
        ".git", "results", "__pycache__", ".pytest_cache", "*.egg-info"))
    versions = clone / "common" / "versions.py"
    text = versions.read_text()
    versions.write_text(text.replace('Requirement("keras", "3.15"', 'Requirement("keras", "99"'))
    assert versions.read_text() != text
    proc = run_cli([sys.executable, str(clone / "resnet50v1.5" / "main.py"), "--mode", "train"])
    assert proc.returncode == 2, proc.stderr
    assert stderr_last_line(proc).startswith(
        "main.py: error: keras 3.15") and "need keras >= 99" in stderr_last_line(proc)
    # Its tests too (pytest.ini's pythonpath): the clone's common, not this checkout's.
    probe = clone / "tests" / "test_probe.py"
    probe.write_text("import common, rn50\n\ndef test_where():\n"
                     "    print(common.__file__, rn50.__file__)\n")
    proc = run_cli([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                    "-p", "no:xdist", str(probe)], cwd=str(clone),
                   env={"TEST_STACK": ""})  # no stack's selection: the probe is unmarked
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert f"{clone}/common/__init__.py {clone}/resnet50v1.5/rn50/__init__.py" in proc.stdout
    # And this checkout still runs its own.
    proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), "--help"])
    assert proc.returncode == 0, proc.stderr


def test_the_probe_reads_this_stack_in_one_process():
    """install_deps.sh's checks (scripts/install_deps.sh, probe): every answer from one process,
    each as the check of its own would give it."""
    proc = run_cli([sys.executable, "-m", "common.versions", "--probe"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    facts = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert list(facts) == ["tensorflow", "keras", "horovod", "dali", "dali_tf", "stack"]
    import importlib.metadata as md
    assert facts["tensorflow"] == versions.installed("tensorflow") == md.version("tensorflow")
    assert facts["keras"] == "ok" and facts["dali_tf"] == "ok"
    assert facts["horovod"] == md.version("horovod") and facts["dali"]
    assert facts["stack"] == versions.describe()


def test_a_failed_check_of_the_probe_is_an_empty_answer_and_the_others_go_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", None)  # import fails
    monkeypatch.setattr(versions, "problems", lambda: ["keras 3.3.2 is installed"])
    facts = dict(versions.probe())
    assert facts["horovod"] == "" and facts["stack"] == ""
    assert facts["tensorflow"] and facts["dali_tf"] == "ok"
