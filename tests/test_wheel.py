"""``pip wheel .`` builds a package that installs and runs: every module of the checkout's
packages is in it (sub-packages, the Triton Python-backend models and the TensorRT engine
script included; it once lacked ``common/export/`` and ``common/checkpoint/``, which the
editable install and ``entry.py``'s path hid), it imports in a fresh environment outside the
checkout, ``python -m rn50``, ``ssd`` and ``txl`` and the console scripts (the datasets'
preparation too) answer ``--help`` from it, the demo digits are made by ``python -m
rn50.digits`` from it and a tiny training run on them exports to Triton from it, and its
requirements hold no test or lint tool (the "test" extra does)."""
import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from conftest import ROOT, tracked_files
from test_layout import PACKAGES, _modules

pytestmark = pytest.mark.one_stack("pip", "packaging is setuptools', the same for both stacks")


def _tracked_copy(dest) -> str:
    """The checkout's tracked files copied to ``dest``: setuptools writes its build/ into the
    tree it builds, which must not be the checkout the suite runs from."""
    import shutil
    for rel in tracked_files():
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
    return str(dest)


def test_the_wheel_holds_every_module_and_runs_outside_the_checkout(tmp_path):
    out = tmp_path / "wheel"
    source = _tracked_copy(tmp_path / "source")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", source, "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    modules = _modules(ROOT, PACKAGES)
    want = {m.replace(".", "/") + ("/__init__.py" if f.endswith("__init__.py") else ".py")
            for m, f in modules.items()}
    backend = os.path.join("common", "export", "triton", "python_backend")
    want |= {f"{backend}/{f}" for f in os.listdir(os.path.join(ROOT, backend)) if f.endswith(".py")}
    want.add("common/export/triton/build_engines.sh")  # the template the TensorRT export fills in
    want.add("serving/triton_perf.sh")  # perf_analyzer's launcher beside the clients
    assert sorted(want - held) == []
    # A fresh environment: the wheel installed into it, the stack's packages (TensorFlow ...)
    # reached through a path file, not through the site this checkout is installed in.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout
    with open(os.path.join(site.strip(), "stack.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([python, "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = ("import importlib, json, sys\n"
            "out = {m: importlib.import_module(m).__file__ for m in sys.argv[1:]}\n"
            "print(json.dumps(out))\n")
    proc = subprocess.run([python, "-c", code, *sorted(modules)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    outside = {m: f for m, f in found.items() if not f.startswith(site.strip())}
    assert outside == {}  # every module from the wheel, none from the checkout
    for package, flag in (("rn50", "--eval_preprocessing"), ("ssd", "--score_threshold"),
                          ("txl", "--mem_len")):
        proc = subprocess.run([python, "-m", package, "--help"], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": ""})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.startswith(f"usage: python -m {package} ") and flag in proc.stdout
    # The wheel's own requirements leave the test and lint tools to its "test" extra.
    meta = next(n for n in held if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    required = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Dist:")]
    plain = {r.split(";")[0].split(">")[0].split("=")[0].strip() for r in required
             if "extra ==" not in r}
    extra = {r.split(";")[0].split(">")[0].split("=")[0].strip() for r in required
             if "extra == \"test\"" in r}
    assert not plain & {"pytest", "pytest-xdist", "ruff"}, plain
    assert extra == {"pytest", "pytest-xdist", "ruff"}, extra
    # Console scripts, and an export to Triton from outside the checkout: the export reads
    # files beside its modules (build_engines.sh, the Python-backend models), which the wheel
    # lacked (it exited 1: "cannot write the TensorRT models to build").
    env = {**os.environ, "PYTHONPATH": ""}
    bin_dir = venv / "bin"
    for script, flag in (("tf-resnet50", "--eval_preprocessing"), ("tf-ssd320", "--trunk"),
                         ("tf-transformerxl", "--mem_len"),
                         ("tf-resnet50-import-weights", "--from"),
                         ("tf-resnet50-prepare", "--val_labels"),
                         ("tf-ssd320-prepare", "coco_root"),
                         ("tf-transformerxl-prepare", "corpus_dir")):
        proc = subprocess.run([str(bin_dir / script), "--help"], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path, env=env)
        assert proc.returncode == 0 and flag in proc.stdout, (script, proc.stderr[-2000:])
    # The demo data from the wheel (python -m rn50.digits ran common/entry.py by a path that
    # exists only in a checkout: FileNotFoundError), trained on and exported.
    digits = tmp_path / "digits"
    proc = subprocess.run([python, "-m", "rn50.digits", str(digits), "--train_shards", "2",
                           "--val_shards", "1"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(digits / "records")
    run = tmp_path / "run"
    proc = subprocess.run([str(bin_dir / "tf-resnet50"), "--preset", "tiny", "--mode", "train",
                           "--data_dir", str(digits / "records"),
                           "--iter_unit", "batch", "--num_iter", "1", "--results_dir", str(run),
                           "--export_dir", str(run / "export"), "--export_triton",
                           str(run / "triton")], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "triton" / "cpu" / "resnet50_preprocess" / "1" / "model.py").is_file()
    assert (run / "triton" / "cpu" / "resnet50_python" / "1" / "model.onnx").is_file()
    script = (run / "triton.tensorrt" / "build_engines.sh").read_text()
    assert "resnet50_tensorrt" in script and "@ENGINES@" not in script
