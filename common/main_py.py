"""``main.py`` run in a process of its own, the command line a user types: what the scripts
that run it as a user would (learning checks, benchmark tools) share; not part of a run itself
(``common/runner.py``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

from common.errors import UsageError
from common.runtime.dllogger import last_summary, read_records


def fresh_results_dir(path: str) -> str:
    """``path`` emptied for a new run: the learning checks keep their runs where the report
    (``python -m benchtools.report``) reads them, and a run that found an earlier one's
    checkpoints would resume it. Only a directory that holds a run (its log.json) is removed."""
    if os.path.isdir(path) and os.listdir(path):
        if not os.path.exists(os.path.join(path, "log.json")):
            raise UsageError(f"{path} is not empty and holds no run (no log.json): not removed")
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    return path


def run_main_py(main_py: str, args: Sequence[str], results_dir: str) -> list[dict]:
    """Runs ``python main_py ARGS --results_dir RESULTS_DIR`` in a process of its own, the
    command line a user types (and clean memory for each run), and returns the DLLogger records
    of its log.json. Its stdout is dropped, its stderr shown; a failed run raises, and so does
    one stopped by a signal (it exits 0 with a checkpoint, but its figures are not a whole
    run's: a learning check's table failed on the missing throughput instead)."""
    subprocess.run([sys.executable, main_py, *args, "--results_dir", results_dir], check=True,
                   stdout=subprocess.DEVNULL)
    records = read_records(os.path.join(results_dir, "log.json"))
    try:
        summary = last_summary(records)
    except IndexError:  # no summary written (a mode that writes none): nothing to refuse
        return records
    if summary.get("stopped_by_signal"):
        raise UsageError(f"{os.path.basename(main_py)} in {results_dir} was stopped by a signal "
                         f"at step {summary.get('final_step')}: its figures are not a whole "
                         "run's")
    return records
