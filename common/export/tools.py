"""The export's external tools (tf2onnx, Model Optimizer), each run in a process of its own:
they rewrite graphs with process-wide settings, need another environment, or print many lines
that belong in a log of their own, not in the run's or beside what they write."""
from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence

from common.errors import one_line


def run_with_log(cmd: Sequence[str], prefix: str, output: str, cwd: str | None = None
                 ) -> str | None:
    """Runs a tool (tf2onnx, Model Optimizer) whose many lines belong in a log of their own,
    not beside what it writes: a temporary file, removed when the tool succeeds (exit 0 and
    ``output`` written). None then; else "(log: PATH): its last line", for the caller's one
    line."""
    fd, log_path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    if proc.returncode == 0 and os.path.exists(output):
        os.remove(log_path)
        return None
    with open(log_path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    return f"(log: {log_path}): {one_line(lines[-1]) if lines else 'no output'}"
