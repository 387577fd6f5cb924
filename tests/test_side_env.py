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
