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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["SIGTERM", "Ctrl-C", "SIGKILL"])
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
    leftovers = sorted(n for n in os.listdir(tmp_path) if n.startswith(".export."))
    if sig == signal.SIGKILL:  # killed before the exchange: the earlier export, untouched
        assert proc.returncode == -signal.SIGKILL
        assert now == earlier
        assert len(leftovers) == 1 and leftovers[0].startswith(".export.staging-")
        after = _export(tmp_path, digits_records, 3, export)  # the next export names it
        assert after.returncode == 0, after.stderr[-2000:]
        assert (f"{tmp_path / leftovers[0]}: a write of {export} that was stopped before it "
                "went in place") in after.stdout
        assert (tmp_path / leftovers[0]).is_dir()  # named, not deleted
        assert _whole(export) not in (earlier, now)
        return
    # The signal waited for the swap: the new export is in place, and the line says so.
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert now != earlier
    assert leftovers == []  # the earlier export's copy removed, no staging left
    line = proc.stderr.strip().splitlines()[-1]
    assert line == (f"main.py: {sig.name}: stopped after writing the export to {export}; "
                    f"the export in {export} is the new one, whole"), proc.stderr[-2000:]


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
