"""Helpers for the fault tests: checksums of a tree, tmpfs mounts for full or read-only disks."""
import contextlib
import hashlib
import os
import shutil
import subprocess

import pytest
from conftest import step_losses


def digests(root) -> dict:
    """{relative path: sha256} of every file below ``root``."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def ckpt_digests(model_dir) -> dict:
    """Checksums of the checkpoint files proper (not TensorFlow's 'checkpoint' state file)."""
    return {k: v for k, v in digests(model_dir).items() if os.path.basename(k).startswith("ckpt-")}


@contextlib.contextmanager
def tmpfs(path, size_kib: int, read_only: bool = False):
    """A small tmpfs at ``path`` (a full disk, or a read-only one); skips where mounting is not
    allowed (not root, or a container without CAP_SYS_ADMIN)."""
    os.makedirs(path, exist_ok=True)
    opts = f"size={size_kib}k" + (",ro" if read_only else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def damaged_copy(prepared, tmp_path):
    """A copy of a prepared dataset (``tmp_path/data``) for a test to damage."""
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    return data


def main_in_process(task_cls, capsys, argv) -> tuple[int, str]:
    """``runner.main`` (main.py's code path, in this process): the exit code and the last line
    on stderr."""
    from common import runner
    code = runner.main(task_cls, ["main.py", *argv])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    return code, lines[-1] if lines else ""


def trained_steps(results_dir) -> int:
    """Training steps logged in ``results_dir/log.json`` (0 when there is none)."""
    from common.runtime import dllogger
    path = os.path.join(results_dir, "log.json")
    if not os.path.exists(path):
        return 0
    return len(step_losses(dllogger.read_records(path)))
