"""The export's external tools (tf2onnx, Model Optimizer), each run in a process of its own:
they rewrite graphs with process-wide settings, need another environment, or print many lines
that belong in a log of their own, not in the run's or beside what they write."""
from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence

from common.errors import one_line


def run_with_log(cmd: Sequence[str], prefix: str, output: str, cwd: str | None = None,
                 check: Callable[[str], str | None] | None = None,
                 log_dir: str | None = None) -> str | None:
    """Runs a tool (tf2onnx, Model Optimizer) whose many lines belong in a log of their own,
    not beside what it writes: a file in ``log_dir`` (the run's results directory; the
    temporary directory without one), removed when the tool succeeds: exit 0, ``output``
    written and, with ``check``, ``check(output)`` None (what the tool wrote is what it should
    be: a tool can exit 0 with a cut or junk file). None then; else "(log: PATH): the reason",
    for the caller's one line."""
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
    fd, log_path = tempfile.mkstemp(prefix=prefix, suffix=".log", dir=log_dir)
    try:
        with os.fdopen(fd, "w") as log:
            proc = subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    except OSError as e:  # the tool's python is gone, or not a program
        os.remove(log_path)
        return f"({cmd[0]} cannot run: {e.strerror})"
    except BaseException:  # a stop signal cut the tool short: its half log tells nothing
        os.remove(log_path)
        raise
    if proc.returncode == 0 and os.path.exists(output):
        wrong = check(output) if check else None
        if wrong is None:
            os.remove(log_path)
            return None
        return f"(log: {log_path}): it exited 0, but {wrong}"
    with open(log_path, errors="replace") as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    if proc.returncode == 0:
        return f"(log: {log_path}): it exited 0 without writing {os.path.basename(output)}"
    return f"(log: {log_path}): {one_line(lines[-1]) if lines else 'no output'}"
