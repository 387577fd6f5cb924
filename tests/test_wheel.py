"""``pip wheel .`` builds a package that installs and runs: every module of the checkout's
packages is in it (sub-packages, the Triton Python-backend models and the TensorRT engine
script included; it once lacked ``common/export/`` and ``common/checkpoint/``, which the
editable install and ``entry.py``'s path hid), it imports in a fresh environment outside the
checkout, ``python -m rn50``, ``ssd`` and ``txl`` and the console scripts (the datasets'
preparation too) answer ``--help`` from it, the demo digits are made by ``python -m
rn50.digits`` from it and a tiny training run on them exports to Triton from it, and its
requirements hold no test or lint tool (the "test" extra does)."""
import json
import os
import subprocess
import sys
import sysconfig
import time
import zipfile

import pytest
from conftest import ROOT, setup_py, tracked_files
from test_layout import PACKAGES, _modules

from tf_model_scripts import version

pytestmark = pytest.mark.one_stack("pip", "packaging is setuptools', the same for both stacks")


def _tracked_copy(dest) -> str:
    """The checkout's tracked files copied to ``dest``, a clone of its commit (the build
    reads the commit and whether the files differ from it): setuptools writes its build/ into
    the tree it builds, which must not be the checkout the suite runs from."""
    import shutil
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", ROOT, str(dest)],
                   check=True, timeout=120)
    subprocess.run(["git", "-C", str(dest), "reset", "-q"], check=True, timeout=120)
    for rel in tracked_files():
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
    return str(dest)


def test_a_tree_without_git_is_versioned_by_the_commit_recorded_in_it_or_by_the_release(
        tmp_path):
    """An sdist or a Docker image's copy (no .git): the commit docker/build.sh passed, which
    the Dockerfile records, else the release alone and a card that says why."""
    (tmp_path / "tf_model_scripts").mkdir()
    assert version.build_info(str(tmp_path)) == {
        "version": version.RELEASE, "commit": None, "dirty": False}
    commit = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "tf_model_scripts" / version.BUILD_FILE).write_text(
        json.dumps({"commit": commit, "dirty": True}))
    assert version.build_info(str(tmp_path)) == {
        "version": f"{version.RELEASE}+g0123456789ab.dirty", "commit": commit, "dirty": True}
    from packaging.version import Version
    assert Version(version.version_of({"commit": commit, "dirty": True})).local == \
        "g0123456789ab.dirty"  # a PEP 440 local label pip accepts


def test_the_import_guard_checks_every_top_level_package_the_wheel_installs():
    """tf_model_scripts checks each top-level name the wheel installs (setup.py's, from
    common/models.py's table)."""
    import tf_model_scripts
    assert set(tf_model_scripts.PACKAGES) == set(setup_py().TOP_LEVEL) - {"tf_model_scripts"}


def test_the_wheel_holds_every_module_and_runs_outside_the_checkout(tmp_path):
    out = tmp_path / "wheel"
    source = _tracked_copy(tmp_path / "source")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", source, "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    # The build says its commit: in the version's local label and in the wheel's record.
    build = version.build_info(ROOT)
    assert build["commit"] and wheel.name.startswith(
        f"tf_model_scripts-{version.RELEASE}+g{build['commit'][:12]}"
        f"{'.dirty' if build['dirty'] else ''}-"), wheel.name
    held = set(zipfile.ZipFile(wheel).namelist())
    assert json.loads(zipfile.ZipFile(wheel).read(f"tf_model_scripts/{version.BUILD_FILE}")) \
        == build
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
    # The wheel's own requirements leave the test and lint tools to its "test" extra, and the
    # profiler (xprof, which brings cloud-storage SDKs) to its "profile" extra.
    required = _requires(wheel)
    plain = required[""]
    assert not plain & {"pytest", "pytest-xdist", "ruff", "tensorboard-plugin-profile"}, plain
    assert required["test"] == {"pytest", "pytest-xdist", "ruff"}, required
    assert required["profile"] == {"tensorboard-plugin-profile"}, required
    # Console scripts, and an export to Triton from outside the checkout: the export reads
    # files beside its modules (build_engines.sh, the Python-backend models), which the wheel
    # lacked (it exited 1: "cannot write the TensorRT models to build").
    env = {**os.environ, "PYTHONPATH": ""}
    bin_dir = venv / "bin"
    helps = {"tf-resnet50": "--eval_preprocessing", "tf-ssd320": "--trunk",
             "tf-transformerxl": "--mem_len", "tf-resnet50-import-weights": "--from",
             "tf-resnet50-prepare": "--val_labels", "tf-ssd320-prepare": "coco_root",
             "tf-transformerxl-prepare": "corpus_dir"}
    assert set(helps) == set(setup_py().SCRIPTS)  # every console script common/models.py names
    for script, flag in helps.items():
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
    # The card names the build that exported it (no git outside the checkout: the wheel's).
    built_by = json.loads((run / "export" / "model_card.json").read_text())["project"]
    assert (built_by["version"], built_by["commit"], built_by["modified"]) == (
        version.version_of(build), build["commit"], build["dirty"])
    assert (run / "triton" / "cpu" / "resnet50_python" / "1" / "model.onnx").is_file()
    script = (run / "triton.tensorrt" / "build_engines.sh").read_text()
    assert "resnet50_tensorrt" in script and "@ENGINES@" not in script
    # From Python by the distribution's own name, with no editable finder on the path.
    proc = subprocess.run([python, "-c", "import sys\nfrom tf_model_scripts import api\n"
                           "print(api.__file__)\nprint(sum('editable' in repr(f).lower() "
                           "for f in sys.meta_path))"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    site_dir = site.strip()
    assert proc.stdout.split() == [os.path.join(site_dir, "common", "api.py"), "0"]
    # A project's own common/ in the working directory (where python -c and -m look first):
    # named in one line, never imported (it would say so).
    project = tmp_path / "project"
    (project / "common").mkdir(parents=True)
    (project / "common" / "__init__.py").write_text("raise SystemExit('a foreign common ran')\n")
    taken = (f"tf-model-scripts: the module name 'common' is taken by "
             f"{project / 'common' / '__init__.py'}, not this distribution's common (installed "
             f"at {site_dir}): a folder of that name in the working directory or on PYTHONPATH, "
             "or another distribution of that name; run from another directory, or rename or "
             "uninstall it")
    proc = subprocess.run([python, "-m", "rn50", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=project, env=env)
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [taken])
    proc = subprocess.run([python, "-c", "from tf_model_scripts import api"],
                          capture_output=True, text=True, timeout=120, cwd=project, env=env)
    assert proc.returncode == 1 and \
        proc.stderr.splitlines()[-1] == f"tf_model_scripts.ForeignPackage: {taken}"
    # Another distribution of the name installed over ours (PyPI's common wrote its
    # __init__.py over this one's), then uninstalled (which removed it): one line each.
    init = os.path.join(site_dir, "common", "__init__.py")
    with open(init, "rb") as fh:
        kept = fh.read()
    for what in ("written over", "removed"):
        if what == "written over":
            with open(init, "w") as fh:
                fh.write("# another distribution's common\n")
        else:
            os.remove(init)
        proc = subprocess.run([str(bin_dir / "tf-transformerxl"), "--help"],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert (proc.returncode, proc.stderr.splitlines()) == (2, [
            f"tf-model-scripts: {init} is not the file this distribution installed ({what}: "
            "another distribution of the name 'common' was installed or uninstalled over it); "
            "uninstall that one and run pip install --force-reinstall tf-model-scripts"]), \
            proc.stderr
    with open(init, "wb") as fh:
        fh.write(kept)
    _served_from_the_wheel(_clients_wheel(source, tmp_path / "clients-wheel"), run, tmp_path)


def _requires(wheel) -> dict[str, set[str]]:
    """The wheel's ``Requires-Dist`` lines as packaging reads them: extra ("" for none) -> the
    projects it requires."""
    import re

    from packaging.requirements import Requirement
    names = zipfile.ZipFile(wheel).namelist()
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    out: dict[str, set[str]] = {"": set()}
    for line in meta.decode().splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1])
            extra = re.search(r'extra == "([^"]+)"', str(req.marker or ""))
            out.setdefault(extra.group(1) if extra else "", set()).add(req.name)
    return out


def _clients_wheel(source: str, out):
    """The clients' distribution (clients/pyproject.toml) built from ``source``: the serving
    package alone, requiring what serving/ imports and nothing else."""
    import ast
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", os.path.join(source, "clients"),
                           "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    build = version.build_info(ROOT)
    assert wheel.name.startswith(f"tf_model_scripts_clients-{version.version_of(build)}-")
    names = zipfile.ZipFile(wheel).namelist()
    serving = os.path.join(ROOT, "serving")
    assert sorted(n for n in names if ".dist-info/" not in n) == sorted(
        f"serving/{f}" for f in os.listdir(serving) if f.endswith((".py", ".sh")))
    assert _requires(wheel) == {"": {"tritonclient", "numpy"}, "server": {"nvidia-pytriton"}}
    # What serving/ imports beyond the standard library, every one required: tritonclient (its
    # gRPC client brings protobuf: google), numpy; PyTriton by the "server" extra; TensorFlow
    # only where a command says it needs it (image_client --client_json, pytriton_server).
    imported = set()
    for f in os.listdir(serving):
        if f.endswith(".py"):
            for node in ast.walk(ast.parse(open(os.path.join(serving, f)).read())):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) - {"serving", "__future__"} == {
        "tritonclient", "google", "numpy", "pytriton", "tensorflow"}
    return wheel


def _served_from_the_wheel(wheel, run, tmp_path):
    """The export served and answered from the clients' wheel installed where Triton's client
    and server live (scripts/triton_env.sh's packages, reached by a path file as the stack's
    are above): python -m serving.tritonserver on its cpu/ repository, python -m
    serving.image_client on an image, both outside the checkout."""
    import json
    import urllib.request

    from triton_servers import free_ports, stop, triton_env_python
    triton = triton_env_python()
    venv = tmp_path / "client-venv"
    subprocess.run([triton, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout
    triton_site = subprocess.run([triton, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                  "['purelib'])"], capture_output=True, text=True,
                                 check=True).stdout
    with open(os.path.join(site.strip(), "triton.pth"), "w") as fh:
        fh.write(triton_site.strip() + "\n")
    proc = subprocess.run([python, "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": ""}
    http, grpc, metrics = free_ports(3)
    log = open(tmp_path / "tritonserver.log", "w")
    server = subprocess.Popen([python, "-m", "serving.tritonserver",
                               f"--model-repository={run / 'triton' / 'cpu'}",
                               f"--http-port={http}", f"--grpc-port={grpc}",
                               f"--metrics-port={metrics}"], stdout=log,
                              stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 300
        while True:
            assert server.poll() is None, (tmp_path / "tritonserver.log").read_text()[-3000:]
            assert time.time() < deadline, "tritonserver was not ready in 300 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready",
                                            timeout=10) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        image = tmp_path / "digit.jpg"
        subprocess.run([python, "-c", "import sys, numpy as np; from PIL import Image; "
                        "Image.fromarray(np.full((40, 40, 3), 200, np.uint8)).save(sys.argv[1])",
                        str(image)], check=True, timeout=60)
        proc = subprocess.run([python, "-m", "serving.image_client", "--model", "resnet50",
                               "--url", f"localhost:{http}", "--json", str(image)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        answer = json.loads(proc.stdout.splitlines()[-1])
        assert answer["file"] == str(image) and "classes" in answer, answer
        where = subprocess.run([python, "-c", "import serving; print(serving.__file__)"],
                               capture_output=True, text=True, cwd=tmp_path, env=env).stdout
        assert where.strip() == os.path.join(site.strip(), "serving", "__init__.py")
    finally:
        stop(server, log)
