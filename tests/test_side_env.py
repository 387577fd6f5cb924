"""scripts/side_env.sh's answer for an environment that is there: a marker of the check that
passed in it answers the next calls (the check imports PyTorch or TensorFlow, and every
`make test` asks), and an install into the environment takes its markers away."""
import os
import subprocess
import sys

from conftest import OWN_HANDLING, ROOT

pytestmark = OWN_HANDLING
SIDE_ENV = os.path.join(ROOT, "scripts", "side_env.sh")


def _side_env(cache, check, where, *packages):
    script = (f'log() {{ echo "[test] $*" >&2; }}; source {SIDE_ENV}; '
              f'side_env {sys.executable} demo "a demo" "$1" {where} "${{@:2}}"')
    return subprocess.run(["bash", "-c", script, "side_env", check, *packages],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TF_MODEL_SCRIPTS_CACHE": str(cache)})


def _venv(cache):
    """An environment as side_env names it, its python this one (nothing is installed)."""
    tag = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    venv = cache / "venvs" / f"demo-{tag}"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    return venv


def test_a_passed_check_leaves_a_marker_that_answers_the_next_call(tmp_path):
    venv = _venv(tmp_path)
    flag = tmp_path / "ran"
    check = f"open({str(flag)!r}, 'a').write('x')"  # counts its runs
    first = _side_env(tmp_path, check, 1, "pkg==1")
    assert first.returncode == 0 and first.stdout.strip() == str(venv / "bin" / "python")
    markers = [n for n in os.listdir(venv) if n.startswith(".side-env-")]
    assert len(markers) == 1 and flag.read_text() == "x"
    second = _side_env(tmp_path, check, 1, "pkg==1")
    assert second.returncode == 0 and flag.read_text() == "x"  # not run again
    # Another check or other packages: a marker of their own; the first one's still answers.
    third = _side_env(tmp_path, check, 1, "pkg==2")
    assert third.returncode == 0 and flag.read_text() == "xx"
    assert len([n for n in os.listdir(venv) if n.startswith(".side-env-")]) == 2


def test_a_failing_check_leaves_no_marker_and_is_asked_again(tmp_path):
    venv = _venv(tmp_path)
    proc = _side_env(tmp_path, "raise SystemExit(1)", 1)  # WHERE=1: says where, makes nothing
    assert proc.returncode == 1 and proc.stdout.strip() == str(venv / "bin" / "python")
    assert not [n for n in os.listdir(venv) if n.startswith(".side-env-")]


def test_completing_an_environment_takes_its_markers_away(tmp_path):
    """An environment whose check fails but whose pip runs is completed by installing into it:
    what the markers said of it before no longer holds; its own check's marker is made anew."""
    venv = _venv(tmp_path)
    (venv / ".side-env-0123456789abcdef").touch()  # another check's marker
    runs = tmp_path / "runs"
    # Fails the two checks before the install (side_env's, then under the lock), passes after.
    check = (f"import sys; f = open({str(runs)!r}, 'a+'); f.write('x'); f.seek(0); "
             f"sys.exit(0 if len(f.read()) >= 3 else 1)")
    empty = tmp_path / "nothing.txt"
    empty.write_text("")  # an install that succeeds without the network
    proc = _side_env(tmp_path, check, 0, "-r", str(empty))
    assert proc.returncode == 0 and "completing" in proc.stderr, proc.stderr
    assert runs.read_text() == "xxx"
    markers = [n for n in os.listdir(venv) if n.startswith(".side-env-")]
    assert len(markers) == 1 and markers != [".side-env-0123456789abcdef"]


def test_a_marker_answers_only_while_the_environments_files_are_as_they_were(tmp_path):
    """An environment broken after its marker was written (a package removed) still answered
    ready; the marker holds a fingerprint of the installed files, so the check runs again (and
    fails here: WHERE=1 makes nothing). Bytecode caches written by imports change nothing."""
    venv = _venv(tmp_path)
    package = venv / "lib" / "python3.11" / "site-packages" / "demo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    flag = tmp_path / "ran"
    check = (f"import os, sys; open({str(flag)!r}, 'a').write('x'); "
             f"sys.exit(0 if os.path.exists({str(package / '__init__.py')!r}) else 1)")
    assert _side_env(tmp_path, check, 1).returncode == 0 and flag.read_text() == "x"
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"cache")
    assert _side_env(tmp_path, check, 1).returncode == 0 and flag.read_text() == "x"
    (package / "__init__.py").unlink()
    proc = _side_env(tmp_path, check, 1)
    assert proc.returncode == 1 and flag.read_text() == "xx"


def test_tritonserver_py_in_a_broken_triton_environment_says_how_to_repair_it(tmp_path):
    """Its advice was to run it with scripts/triton_env.sh's python, the very environment that
    was broken; in an environment of side_env's cache it says to run triton_env.sh again."""
    venv = tmp_path / "venvs" / "triton-pytriton0.7.0-py3.11"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    env = {**os.environ, "TF_MODEL_SCRIPTS_CACHE": str(tmp_path)}
    proc = subprocess.run([str(venv / "bin" / "python"),
                           "-m", "serving.tritonserver"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"tritonserver.py: error: nvidia-pytriton cannot be imported in {venv}, which "
        f"scripts/triton_env.sh made: run scripts/triton_env.sh again, which repairs it (or "
        f"remove {venv} and it makes it anew)"], proc.stderr
    proc = subprocess.run([sys.executable, "-m", "serving.tritonserver"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert proc.stderr.splitlines() == ["tritonserver.py: error: nvidia-pytriton is not "
                                        "installed here: run it with the python "
                                        "scripts/triton_env.sh prints"], proc.stderr
