"""The stack check every main.py and prepare_dataset.py makes before any model code runs."""
import os
import sys

import pytest
from conftest import ROOT, run_cli, stderr_last_line

from common import versions


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


def test_main_without_the_repository_installed_says_how_to_install_it():
    # -S: no site-packages, so no editable install either; the script's own folder stays.
    proc = run_cli([sys.executable, "-S", os.path.join(ROOT, "ssd320", "main.py")])
    assert proc.returncode == 2, proc.stderr
    assert stderr_last_line(proc) == (
        "main.py: error: this repository is not installed; run `bash scripts/install_deps.sh` "
        "(or `pip install --no-deps -e .`) at its root")


def test_main_of_another_checkout_is_refused_with_the_fix(tmp_path):
    # A second clone whose main.py would otherwise run this checkout's common/ and models.
    clone = tmp_path / "clone"
    (clone / "resnet50v1.5").mkdir(parents=True)
    (clone / "resnet50v1.5" / "main.py").write_text(
        open(os.path.join(ROOT, "resnet50v1.5", "main.py")).read())
    (clone / "common").mkdir()
    (clone / "common" / "entry.py").write_text(
        open(os.path.join(ROOT, "common", "entry.py")).read())
    proc = run_cli([sys.executable, str(clone / "resnet50v1.5" / "main.py"), "--mode", "train"])
    assert proc.returncode == 2, proc.stderr
    assert stderr_last_line(proc) == (
        f"main.py: error: common/ is imported from {ROOT}, another checkout than {clone}; "
        f"run `pip install --no-deps -e {clone}` (scripts/install_deps.sh does)")
