"""Helpers for the fault tests: checksums of a tree, tmpfs mounts for full or read-only disks."""
import contextlib
import hashlib
import os
import subprocess

import pytest


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
