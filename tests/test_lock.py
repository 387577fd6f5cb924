"""The lock files of the pip stack agree with what they lock (requirements.txt, the pins of
common/versions.py, install_deps.sh's DALI), and every file they admit has a hash; an inherited
PIP_CONSTRAINT loses only the pins that exclude what these scripts install."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import OWN_HANDLING, ROOT
from packaging.requirements import Requirement
from packaging.version import Version

from common import versions

LOCKS = ("requirements.lock", "requirements-cuda.lock")

pytestmark = OWN_HANDLING


def _locked(name: str) -> dict[str, set[Version]]:
    """Project name -> the versions the lock pins (one per Python marker)."""
    text = open(os.path.join(ROOT, name)).read()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text)  # the header: a "#" entry
    out: dict[str, set[Version]] = {}
    for entry in entries:
        head = entry.split("\\")[0].strip()
        if not head or head.startswith("#"):
            continue
        m = re.match(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^ ;]+)", head)
        assert m, f"{name}: not an exact pin: {head}"
        assert "--hash=sha256:" in entry, f"{name}: no hash for {head}"
        out.setdefault(versions._name(m.group(1)), set()).add(Version(m.group(3)))
    return out


def _requirements() -> list[Requirement]:
    """requirements.txt's, requirements-test.txt's and requirements-profile.txt's
    (install_deps.sh installs the three)."""
    lines = [ln for name in ("requirements.txt", "requirements-test.txt",
                             "requirements-profile.txt")
             for ln in open(os.path.join(ROOT, name)).read().splitlines()]
    return [Requirement(ln.split("#")[0]) for ln in lines if ln.split("#")[0].strip()]


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_pins_what_requirements_txt_and_the_pins_ask_for(lock):
    locked = _locked(lock)
    for req in _requirements():
        name = versions._name(req.name)
        assert name in locked, f"{lock} lacks {req.name}: run bash scripts/lock.sh"
        for version in locked[name]:
            assert req.specifier.contains(version, prereleases=True), (lock, req, version)
    for r in versions.REQUIREMENTS[1:]:  # tensorflow and keras; numpy follows Python
        assert locked[r.package] == {Version(r.pin)}, (lock, r.package)
    dali = re.search(r"^DALI_VERSION=([0-9.]+)",
                     open(os.path.join(ROOT, "scripts", "install_deps.sh")).read(), re.M)
    assert locked["nvidia-dali-cuda120"] == {Version(dali.group(1))}


def test_the_triton_images_lock_pins_what_its_requirements_name():
    """docker/Dockerfile.triton installs docker/triton-requirements.lock: every package of the
    image's Python pinned with hashes, the requirements' own pins among them."""
    locked = _locked(os.path.join("docker", "triton-requirements.lock"))
    lines = open(os.path.join(ROOT, "docker", "triton-requirements.txt")).read().splitlines()
    named = [Requirement(ln.split("#")[0]) for ln in lines if ln.split("#")[0].strip()]
    assert named and all(str(r.specifier).startswith("==") for r in named)
    for req in named:
        assert locked.get(versions._name(req.name)) == {Version(str(req.specifier)[2:])}, req
    assert len(locked) > len(named)  # what they bring, pinned too
    dockerfile = open(os.path.join(ROOT, "docker", "Dockerfile.triton")).read()
    assert "--require-hashes -r /opt/tf-model-scripts/triton-requirements.lock" in dockerfile


def test_the_cuda_lock_is_the_cpu_lock_plus_cuda():
    cpu, cuda = _locked(LOCKS[0]), _locked(LOCKS[1])
    assert set(cpu) < set(cuda)
    assert {n for n in set(cuda) - set(cpu)} >= {"nvidia-cudnn-cu12", "nvidia-cublas-cu12"}
    assert all(cpu[n] == cuda[n] for n in cpu), [n for n in cpu if cpu[n] != cuda[n]]


def test_inherited_pins_are_kept_but_those_that_exclude_what_is_installed(tmp_path,
                                                                           monkeypatch):
    """As in NGC 25.02: the image pins Keras 3.3.2, below what these scripts need."""
    monkeypatch.setattr(versions, "REQUIREMENTS", (
        versions.Requirement("numpy", "1.26", "1.26.4", ""),
        versions.Requirement("keras", "99.0", "99.0.1", "")))  # installed Keras is below 99
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("onnx>=1.16  # comment\nmatplotlib>=3.8\n")
    lines = ["# the image's\n", "numpy==1.26.4\n", "Keras==3.3.2\n", "onnx==1.15.0\n",
             "matplotlib==3.9.0\n", "tensorflow==2.17.0\n", "keras-nlp\n"]
    kept, lifted = versions.lifted_constraints(lines, str(reqs))
    assert kept == ["# the image's", "numpy==1.26.4", "matplotlib==3.9.0", "tensorflow==2.17.0",
                    "keras-nlp"]
    assert lifted == ["Keras==3.3.2 (these scripts install 99.0.1)",
                      "onnx==1.15.0 (these scripts install >=1.16)"]


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "docker/Dockerfile.cuda"])
def test_the_images_stack_layer_has_every_file_install_deps_reads(dockerfile):
    """The stack is installed in a layer of its own, before `COPY . .`: every file of the
    repository that install_deps.sh reads must be copied before it (the CUDA image installs
    from requirements-cuda.lock there)."""
    text = open(os.path.join(ROOT, dockerfile)).read()
    stack_layer = text.split("COPY . .")[0]
    copied = set()
    for line in stack_layer.splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            copied |= {s if "/" in s or dest == "./" else dest + s for s in sources}
    script = open(os.path.join(ROOT, "scripts", "install_deps.sh")).read()
    read = set(re.findall(r'"\$here/([^"$]+)"', script)) | {"common/versions.py"}
    assert read <= copied, read - copied


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "docker/Dockerfile.cuda"])
def test_the_stack_layers_python_runs_on_the_files_copied_before_it(dockerfile, tmp_path):
    """install_deps.sh runs common/versions.py in that layer, where nothing else of the
    repository is (and no editable install): what it imports must be copied too. Here in a
    folder of only those files, without site-packages (-S)."""
    text = open(os.path.join(ROOT, dockerfile)).read()
    for line in text.split("COPY . .")[0].splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            for source in sources:
                target = tmp_path / (source if "/" in source or dest == "./" else dest + source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(os.path.join(ROOT, source), target)
    for args in (["--pin", "keras"], ["--probe"]):
        proc = subprocess.run([sys.executable, "-S", "-m", "common.versions", *args],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-2000:]


def _lift(tmp_path, *constraints):
    proc = subprocess.run([sys.executable, "-m", "common.versions", "--lift-pins",
                           os.path.join(ROOT, "requirements.txt"), *constraints],
                          capture_output=True, text=True, cwd=ROOT)
    return proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines()


def test_an_inherited_constraint_url_and_relative_includes_are_kept_working(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.txt").write_text("matplotlib>=3.8\n")
    outer = tmp_path / "outer.txt"
    outer.write_text("-c sub/more.txt\n--requirement=sub/more.txt\n-c https://example.com/c.txt\n")
    code, kept, notes = _lift(tmp_path, str(outer), "https://example.com/pins.txt")
    assert code == 0, notes
    assert kept == [f"-c {tmp_path / 'sub' / 'more.txt'}",
                    f"--requirement={tmp_path / 'sub' / 'more.txt'}",
                    "-c https://example.com/c.txt", "-c https://example.com/pins.txt"]
    assert notes == ["https://example.com/pins.txt kept as it is (a URL: its pins are not "
                     "checked here)"]


def test_a_constraint_that_excludes_what_tensorflow_was_built_against_names_pip_constraint(
        tmp_path):
    import importlib.metadata as md
    pins = tmp_path / "pins.txt"
    pins.write_text("protobuf==3.0.0\n")
    code, _, notes = _lift(tmp_path, str(pins))
    assert code == 3 and notes == [
        f"clash: protobuf==3.0.0 excludes the installed protobuf {md.version('protobuf')}, "
        "which these scripts keep (TensorFlow, Horovod and DALI were built against it)"]
    # install_deps.sh stops there, naming PIP_CONSTRAINT, before pip changes anything.
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_deps.sh")],
                          capture_output=True, text=True,
                          env={**os.environ, "PIP_CONSTRAINT": str(pins),
                               "PYTHON": sys.executable})
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert lines[-2] == (f"[install_deps] PIP_CONSTRAINT={pins}: protobuf==3.0.0 excludes the "
                         f"installed protobuf {md.version('protobuf')}, which these scripts keep "
                         "(TensorFlow, Horovod and DALI were built against it)")
    assert lines[-1].startswith("[install_deps] PIP_CONSTRAINT's pins above cannot be met")
