"""An export goes into place in one step. The swap is widened to seconds (a sitecustomize slows
the exchange and the renames around it) and main.py is stopped inside it by SIGTERM, Ctrl-C
and SIGKILL: each time the export directory holds a whole export, the earlier one or the new
one, the line says which, and what a kill leaves beside it is named by the next export, not
deleted. Where the file system cannot exchange two directories (NFS), the two renames that
replace the exchange are undone by the next run when a kill falls between them."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from conftest import ROOT, TINY

from common import files

MAIN = os.path.join(ROOT, "resnet50v1.5", "main.py")
pytestmark = pytest.mark.one_stack(
    "pip", "the swap is the file system's and Python's signals', the same for both stacks")
# Loaded at start-up (PYTHONPATH): slows the exchange and every rename of the export's
# staging, and notes in SWAP_MARKER when the swap begins.
SITECUSTOMIZE = """
import os, time
from common import files
_exchange, _rename = files._exchange, os.rename

def _mark(what):
    with open(os.environ["SWAP_MARKER"], "a") as f:
        f.write(what + "\\n")
    time.sleep(float(os.environ["SWAP_DELAY"]))

def exchange(a, b):
    _mark("exchange")
    return False if os.environ.get("NO_EXCHANGE") else _exchange(a, b)

def rename(a, b, *args, **kw):
    if ".staging-" in str(a) or ".replaced-" in str(b):
        _mark(f"rename {os.path.basename(str(a))}")
    return _rename(a, b, *args, **kw)

files._exchange, os.rename = exchange, rename
"""


def _export(tmp_path, data, steps, export, env=None, wait=None):
    """main.py training to ``steps`` and exporting; with ``wait``, started in the background
    and handed to ``wait(proc)`` once the swap has begun."""
    args = [sys.executable, MAIN, *TINY, "--mode", "train", "--iter_unit", "batch",
            "--num_iter", str(steps), "--data_dir", data, "--results_dir",
            str(tmp_path / "run"), "--export_dir", str(export)]
    full = {**os.environ, **(env or {})}
    if wait is None:
        return subprocess.run(args, capture_output=True, text=True, env=full, timeout=300)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full)
    marker = env["SWAP_MARKER"]
    deadline = time.time() + 240
    while not os.path.exists(marker):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    wait(proc)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _slow(tmp_path, name, **extra):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": os.pathsep.join([str(site), ROOT, os.environ.get("PYTHONPATH", "")]),
            "SWAP_MARKER": str(tmp_path / f"marker-{name}"), "SWAP_DELAY": "3", **extra}


def _whole(export) -> bytes:
    """The export's fingerprint, once the SavedModel is checked to load and its assets read."""
    tf.saved_model.load(str(export)).signatures["serving_default"]
    assert (export / "assets" / "client.json").read_text().startswith("{")
    assert (export / "notes.txt").read_text() == "the user's\n"  # carried into every export
    return (export / "fingerprint.pb").read_bytes()


@pytest.fixture(scope="module")
def first_export(tmp_path_factory, digits_records):
    """A run of one step and its export (with a file of the user's in it): each case starts
    from a copy of both."""
    root = tmp_path_factory.mktemp("first")
    first = _export(root, digits_records, 1, root / "export")
    assert first.returncode == 0, first.stderr[-2000:]
    (root / "export" / "notes.txt").write_text("the user's\n")
    return root


# Ctrl-C is held through the swap by the same handler as SIGTERM (common/runtime/graceful_stop.py;
# its own path while starting is tests/test_runtime.py's): `make test-slow` (the suite's time).
# A kill in the swap, whose next run puts the export back, is also the kill-between-renames
# drills' (the first of them in the suite): `make test-slow`, as Ctrl-C.
@pytest.mark.parametrize("sig", [
    signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow),
    pytest.param(signal.SIGKILL, marks=pytest.mark.slow)], ids=["SIGTERM", "Ctrl-C", "SIGKILL"])
def test_a_stop_in_the_swap_leaves_a_whole_export_and_says_which(tmp_path, digits_records, sig,
                                                                 first_export):
    export = tmp_path / "export"
    for name in ("run", "export"):
        shutil.copytree(first_export / name, tmp_path / name)
    earlier = _whole(export)
    env = _slow(tmp_path, sig.name)
    proc = _export(tmp_path, digits_records, 2, export, env,
                   wait=lambda p: (time.sleep(0.5), p.send_signal(sig)))
    now = _whole(export)
    leftovers = sorted(n for n in os.listdir(tmp_path)  # a kill leaves the writer's lock
                       if n.startswith(".export.") and n != ".export.lock")
    if sig == signal.SIGKILL:  # killed before the exchange: the earlier export, untouched
        assert proc.returncode == -signal.SIGKILL
        assert now == earlier
        assert len(leftovers) == 1 and leftovers[0].startswith(".export.staging-")
        after = _export(tmp_path, digits_records, 3, export)  # the next export removes it
        assert after.returncode == 0, after.stderr[-2000:]
        assert (f"removed {tmp_path / leftovers[0]}: a write of {export} that was stopped "
                "before it was whole") in after.stdout
        assert not (tmp_path / leftovers[0]).exists()
        assert _whole(export) not in (earlier, now)
        return
    # The signal waited for the swap: the new export is in place, and the line says so.
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert now != earlier
    assert leftovers == []  # the earlier export's copy removed, no staging left
    line = proc.stderr.strip().splitlines()[-1]
    assert line == (f"main.py: {sig.name}: stopped after writing the export to {export}; "
                    f"the export in {export} is the new one, whole"), proc.stderr[-2000:]


def test_a_stopped_writes_staging_is_removed_by_the_next_write_of_the_place(tmp_path):
    """A staging folder not yet whole (``.export.staging-*``; a whole one is renamed
    ``.export.whole-*`` first) was named at every later run and kept, an export's size, for
    ever: the next write of the same place removes it, said so; another place's is left."""
    target, other = tmp_path / "export", tmp_path / "other"
    stopped = tmp_path / ".export.staging-abc123"
    (stopped / "variables").mkdir(parents=True)
    (stopped / "variables" / "variables.data-00000-of-00001").write_bytes(b"x" * 1000)
    (tmp_path / ".other.staging-def456").mkdir()
    said = []
    files.recover(str(target), said.append)
    assert said == [f"removed {stopped}: a write of {target} that was stopped before it was "
                    "whole"]
    assert not stopped.exists() and (tmp_path / ".other.staging-def456").is_dir()
    assert not other.exists()


def test_a_kill_just_before_or_after_the_exchange_is_named_as_it_is(tmp_path):
    """A write renamed to ``.export.whole-*`` and killed: before the exchange it is the new
    export, not used; just after it, the same name holds the earlier export, which was named
    "a whole write ... not used" (the reverse of the truth) and is now removed, said so."""
    target = tmp_path / "export"
    target.mkdir()
    (target / "saved_model.pb").write_text("the earlier export")
    stage = tmp_path / ".export.staging-abc"
    stage.mkdir()
    (stage / "saved_model.pb").write_text("the new export")
    whole = tmp_path / f".export.whole-abc-{os.stat(stage).st_ino}"
    os.rename(stage, whole)  # as staged_dir names it, the moment before the exchange
    said = []
    files.recover(str(target), said.append)
    assert said == [f"{whole}: a whole write of {target}, stopped just before it went in place "
                    "(not used: the one in place is the earlier): remove it when you no longer "
                    "need it"]
    assert (whole / "saved_model.pb").read_text() == "the new export"
    if not files._exchange(str(whole), str(target)):
        pytest.skip("this file system cannot exchange two directories")
    said = []
    files.recover(str(target), said.append)  # killed right after the exchange
    assert (target / "saved_model.pb").read_text() == "the new export"
    assert not whole.exists()
    assert said == [f"removed {whole}: the earlier export, swapped out by a write that was "
                    f"stopped just after it went in place (the one in {target} is the new one, "
                    "whole)"]


WRITER = """
import os, sys, time
from common import files
target, name = sys.argv[1], sys.argv[2]
with files.staged_dir(target, "the export", log=print) as stage:
    with open(os.path.join(stage, "model.txt"), "w") as f:
        f.write(name)
    open(target + "." + name + "-entered", "w").close()
    while not os.path.exists(target + "." + name + "-release"):
        time.sleep(0.1)
"""


def test_a_trial_export_waits_for_the_writer_and_sweeps_no_live_trial(tmp_path):
    """The trial export before training (``export_bytes``) swept ``.size-probe-*`` outside the
    writers' lock, and removed another run's trial in progress, calling it stopped (3 of 3
    runs): it now waits for the writer, and sweeps only what no writer holds."""
    import threading

    from common import export, runner
    from rn50.task import ResNetTask
    target = tmp_path / "export"
    target.mkdir()
    trainer = runner.setup(ResNetTask, ["main.py", *TINY, "--mode", "train", "--results_dir",
                                        str(tmp_path / "r")])
    trainer.log.close()
    held, release, said = threading.Event(), threading.Event(), []
    live = target / f"{files.PROBE}other-run"

    def other_run():  # another process's trial export: its probe, under the lock
        with files.one_writer(str(target)):
            live.mkdir()
            held.set()
            release.wait(60)
            assert live.is_dir()  # still there: nobody swept it
            live.rmdir()
    other = threading.Thread(target=other_run)
    other.start()
    assert held.wait(60)
    threading.Timer(2, release.set).start()
    need = export.export_bytes(trainer.export_module, str(target), False, log=said.append)
    other.join(60)
    assert need > 1 << 20 and not other.is_alive()
    assert said == [f"waiting for another process writing {target} to finish"], said
    assert os.listdir(target) == []


def test_two_writes_of_one_directory_take_turns_and_neither_calls_the_other_stopped(
        tmp_path):
    """Two exports at once both exited 0, the second naming the first's staging "stopped"
    (and a run starting meanwhile did too): the second now waits for the first, and a check
    of the directory meanwhile leaves the write in progress alone."""
    target = tmp_path / "export"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}

    def start(name):
        return subprocess.Popen([sys.executable, "-u", "-c", WRITER, str(target), name],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    def wait_for(path, proc):
        deadline = time.time() + 120
        while not path.exists():
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.1)
    first = start("first")
    wait_for(tmp_path / "export.first-entered", first)
    said = []
    files.recover(str(target), said.append)
    assert said == [f"note: another process is writing {target} now; what it has beside it is "
                    "left as it is"]
    second = start("second")
    import select
    assert select.select([second.stdout], [], [], 120)[0], "the second write said nothing"
    assert second.stdout.readline().strip() == (f"waiting for another process writing "
                                                f"{target} to finish")
    time.sleep(1)
    assert second.poll() is None and not (tmp_path / "export.second-entered").exists()
    (tmp_path / "export.first-release").touch()
    assert first.wait(60) == 0
    wait_for(tmp_path / "export.second-entered", second)
    (tmp_path / "export.second-release").touch()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0 and out == "", err[-2000:]
    assert (target / "model.txt").read_text() == "second"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".export.")]


def test_without_an_exchange_a_kill_between_the_renames_is_undone_by_the_next_run(tmp_path):
    """NFS has no RENAME_EXCHANGE: the earlier export is renamed aside, then the new one into
    place. A kill between the two leaves no export at the path; the next export (or anything
    that calls ``files.recover``) puts the earlier one back, and says so."""
    target = tmp_path / "export"
    target.mkdir()
    (target / "saved_model.pb").write_text("the earlier export")
    aside = tmp_path / ".export.replaced-abc"
    aside.mkdir()
    os.rename(target, aside / "export")  # where the first rename left it
    said = []
    files.recover(str(target), said.append)
    assert (target / "saved_model.pb").read_text() == "the earlier export"
    assert not aside.exists()
    assert said == [f"put back {target}: a stop between the two renames of its swap had left "
                    f"it aside in {aside}"]


def test_without_an_exchange_the_two_renames_still_swap_the_whole_directory(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    target = tmp_path / "export"
    for text in ("one", "two"):
        with files.staged_dir(str(target), "the export", replaces={"model.txt"}) as stage:
            with open(os.path.join(stage, "model.txt"), "w") as f:
                f.write(text)
        assert (target / "model.txt").read_text() == text
    assert sorted(os.listdir(tmp_path)) == ["export"]


# --- an export keeps its place ----------------------------------------------------------------
# Loaded at start-up: no exchange (NFS), and the first rename of the fallback (the earlier export
# aside) noted in SWAP_MARKER, then slowed, so that a kill lands between the two renames.
BETWEEN_RENAMES = """
import os, time
from common import files
_rename = os.rename

def rename(a, b, *args, **kw):
    out = _rename(a, b, *args, **kw)
    only = os.environ.get("SWAP_ONLY")  # the one directory whose swap is held, else every
    if ".replaced-" in str(b) and (not only or os.path.basename(str(a)) == only):
        with open(os.environ["SWAP_MARKER"], "a") as f:
            f.write("aside\\n")
        time.sleep(float(os.environ["SWAP_DELAY"]))
    return out

files._exchange, os.rename = (lambda a, b: False), rename
"""


def _between_renames(tmp_path, first_export):
    """The first export's run and export copied into ``tmp_path``, a ``sitecustomize`` that
    holds main.py between the fallback's two renames (``BETWEEN_RENAMES``) and the environment
    that loads it: (export, the export's files as they are, env)."""
    export = tmp_path / "export"
    for name in ("run", "export"):
        shutil.copytree(first_export / name, tmp_path / name)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BETWEEN_RENAMES)
    env = {"PYTHONPATH": os.pathsep.join([str(site), ROOT, os.environ.get("PYTHONPATH", "")]),
           "SWAP_DELAY": "30"}
    return export, _whole(export), env


def test_a_kill_between_the_fallbacks_renames_loses_nothing_through_the_next_runs(
        tmp_path, digits_records, first_export):
    """Without an exchange (NFS), main.py killed between the fallback's two renames leaves the
    earlier export aside. The next run's start-up check made an empty directory at the path, so
    its recovery saw a target and deleted the export aside. Now: a run stopped early (SIGTERM
    0.5 s in) finds the earlier export back in place."""
    export, earlier, env = _between_renames(tmp_path, first_export)
    env["SWAP_MARKER"] = str(tmp_path / "marker")
    proc = _export(tmp_path, digits_records, 2, export, env, wait=lambda p: p.kill())
    assert proc.returncode == -signal.SIGKILL
    assert not export.exists()  # aside: .export.replaced-*/export
    # The next run, stopped while it starts: the check before training put the export back.
    args = [sys.executable, MAIN, *TINY, "--mode", "evaluate", "--data_dir", digits_records,
            "--results_dir", str(tmp_path / "run"), "--export_dir", str(export)]
    stopped = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not export.exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    stopped.send_signal(signal.SIGTERM)
    out, err = stopped.communicate(timeout=120)
    assert f"put back {export}: a stop between the two renames of its swap" in out, (out, err)
    assert _whole(export) == earlier
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".export.replaced-")]


# The same recovery as the test before, of the Triton repositories' swap: three exports with
# Triton repositories (81 s). Run by make test-slow: the recovery is the one function both
# directories go through (common/files.py), which the test before drives in the suite.
@pytest.mark.slow
def test_a_kill_between_the_triton_repositorys_renames_keeps_every_version(
        tmp_path, digits_records, first_export):
    """A whole export with its Triton repositories, then one more killed between its renames,
    then another: every version of the repositories is there to roll back to."""
    repo = tmp_path / "triton"
    export, earlier, env = _between_renames(tmp_path, first_export)
    args = [sys.executable, MAIN, *TINY, "--mode", "evaluate", "--data_dir", digits_records,
            "--results_dir", str(tmp_path / "run"), "--export_dir", str(export)]
    deadline = time.time() + 120
    done = subprocess.run([*args, "--export_triton", str(repo)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    versions = sorted(os.listdir(repo / "cpu" / "resnet50_python"))
    env.update(SWAP_MARKER=str(tmp_path / "marker2"), SWAP_ONLY="triton")
    killed = subprocess.Popen([*args, "--export_triton", str(repo)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env})
    while not os.path.exists(env["SWAP_MARKER"]) and time.time() < deadline + 300:
        assert killed.poll() is None, killed.communicate()
        time.sleep(0.1)
    killed.kill()
    killed.communicate(timeout=60)
    again = subprocess.run([*args, "--export_triton", str(repo)], capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"put back {repo}: a stop between the two renames" in again.stdout
    after = sorted(os.listdir(repo / "cpu" / "resnet50_python"))
    assert set(versions) < set(after), (versions, after)  # the earlier kept, one more added
    assert _whole(export) != earlier


# `make test-slow` (the suite's time budget): the swap itself is the other cases'.
@pytest.mark.slow
def test_an_export_through_a_link_keeps_the_link_and_a_mount_point_is_refused(
        tmp_path, digits_records, first_export):
    """--export_dir and --export_triton given as symbolic links: the export goes where they
    point and the links stay (a server reading through them sees the new one); a mount point
    (docker run -v host:/models) is refused with one line before training (its swap failed
    with "Device or resource busy" after the whole run)."""
    from reliability_helpers import tmpfs
    real, link = tmp_path / "real", tmp_path / "export"
    shutil.copytree(first_export / "export", real)
    link.symlink_to(real)
    (tmp_path / "repo-real").mkdir()
    (tmp_path / "repo").symlink_to(tmp_path / "repo-real")
    args = [sys.executable, MAIN, *TINY, "--mode", "evaluate", "--data_dir", digits_records,
            "--model_dir", str(first_export / "run" / "checkpoints"), "--results_dir",
            str(tmp_path / "run")]
    proc = subprocess.run([*args, "--export_dir", str(link), "--export_triton",
                           str(tmp_path / "repo")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert link.is_symlink() and (tmp_path / "repo").is_symlink()
    assert _whole(real) and (tmp_path / "repo-real" / "cpu" / "resnet50").is_dir()
    with tmpfs(tmp_path / "mnt", 64 * 1024) as mnt:
        proc = subprocess.run([*args, "--export_dir", str(mnt)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines()[-1] == (
            f"main.py: error: --export_dir {mnt}: {mnt} is a mount point: the export is "
            "written beside its directory and swapped in whole, which a mount point cannot "
            f"take; give a directory inside it ({mnt}/export)")
        assert "training" not in proc.stdout and not os.listdir(mnt)


def test_an_export_keeps_the_mode_and_group_of_the_directory_it_replaces(tmp_path, monkeypatch):
    """A staging directory is mkdtemp's (0700): every export became 0700, unreadable by a
    serving container of another user. Now it takes the mode and group it replaces (a shared
    volume's 2775), or the umask's for a new one."""
    import grp
    import stat
    target = tmp_path / "export"
    target.mkdir()
    group = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != os.getgid()), os.getgid())
    os.chown(target, -1, group)
    os.chmod(target, 0o2775)
    with files.staged_dir(str(target), "the export") as stage:
        open(os.path.join(stage, "model.txt"), "w").close()
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == 0o2775 and st.st_gid == group
    fresh = tmp_path / "fresh"
    old = os.umask(0o027)
    try:
        with files.staged_dir(str(fresh), "the export") as stage:
            open(os.path.join(stage, "model.txt"), "w").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o750
