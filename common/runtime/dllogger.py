"""Run logs in three forms, written by rank 0 only.

* JSON lines exactly as NVIDIA DLLogger 1.1.0's ``JSONStreamBackend`` writes them, so existing
  parsers read them: ``DLLL {json}`` with the same keys in the same order, ``datetime`` with its
  UTC offset, and non-finite numbers as ``json.dumps`` writes them (bare ``NaN``, ``Infinity``).
  METADATA records (units and formats), one PARAMETER record with every flag, LOG records with
  ``step: [epoch, global_step]`` and a final summary with ``step: []``.
* Readable stdout: one line per logged step, with a progress bar and ETA when the length is known.
* TensorBoard scalars for every numeric value of a per-step record.

A run *appends* to an existing ``log.json`` (a resumed run adds its own METADATA and PARAMETER
records after the earlier run's summary). A line cut short by a killed process is removed before
appending, and a write that fails (a full disk) is rolled back, so the file only ever holds whole
lines; the run goes on and says on stderr how many records were lost.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TextIO

from common.errors import say


def _jsonable(value):
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        value = value.item()
    return value  # NaN and infinities stay numbers: json.dumps writes them bare, as DLLogger does


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.1f}"
    return str(value)


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * min(done, total) / max(total, 1))
    return f"[{'#' * filled}{'.' * (width - filled)}] {100 * done / max(total, 1):3.0f}%"


def _warn(text: str) -> None:
    try:
        say(f"warning: {text}")
    except OSError:
        pass


def dllogger_line(timestamp: datetime.datetime, elapsed: float, **fields) -> str:
    """One ``DLLL`` line with DLLogger 1.1.0's key order for METADATA and LOG records."""
    head = {"timestamp": str(timestamp.timestamp())}
    if fields.get("type") == "METADATA":
        head.update(elapsedtime=str(elapsed), datetime=str(timestamp))
    else:
        head.update(datetime=str(timestamp), elapsedtime=str(elapsed))
    return "DLLL " + json.dumps({**head, **fields}) + "\n"


class _JsonLines:
    """An append-only file of whole lines: a failed write is truncated away, never left half."""

    def __init__(self, path: str):
        self.path, self.dropped, self._fd = path, 0, None
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.lseek(self._fd, 0, os.SEEK_END)
        if size:  # drop a last line that a killed process left without its newline
            tail = os.pread(self._fd, min(size, 1 << 20), max(0, size - (1 << 20)))
            if not tail.endswith(b"\n"):
                cut = tail.rfind(b"\n")
                keep = size - len(tail) + cut + 1 if cut >= 0 else 0
                os.ftruncate(self._fd, keep)
                _warn(f"{path}: removed a last line left incomplete by an earlier run")

    def write(self, line: str) -> None:
        data = line.encode()
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], end + written)
        except OSError as e:
            os.ftruncate(self._fd, end)  # frees what was written: the file keeps whole lines
            if not self.dropped:
                _warn(f"cannot write {self.path} ({e.strerror}); training goes on, and the log "
                      "keeps only whole records")
            self.dropped += 1

    def lines(self) -> list[bytes]:
        return os.pread(self._fd, os.lseek(self._fd, 0, os.SEEK_END), 0).splitlines(
            keepends=True)

    def rewrite(self, lines: list[bytes]) -> None:
        """The file's lines replaced by ``lines``: written to a new file renamed over this one,
        so that a kill meanwhile leaves one or the other whole."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.writelines(lines)
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.dropped:
            _warn(f"{self.dropped} record(s) could not be written to {self.path}")


class Logger:
    def __init__(
        self,
        enabled: bool = True,
        json_path: str | None = None,
        tensorboard_dir: str | None = None,
        stream: TextIO | None = None,  # None: whatever sys.stdout is when printing
    ):
        self.enabled = enabled
        self._start = time.time()
        self._stream = stream
        self._json = None
        self._tb = None
        if not enabled:
            return
        if json_path:
            os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
            self._json = _JsonLines(json_path)
        if tensorboard_dir:  # TensorFlow only here: read_records serves tools without it
            import tensorflow as tf
            self._tb = tf.summary.create_file_writer(tensorboard_dir)

    # --- DLLogger records -------------------------------------------------------------------
    def _record(self, **fields) -> None:
        if self._json is None:
            return
        now = datetime.datetime.now(datetime.UTC)
        self._json.write(dllogger_line(now, now.timestamp() - self._start, **fields))

    def metadata(self, metric: str, unit: str | None = None, fmt: str = ":.4f", **extra) -> None:
        if self.enabled:
            self._record(type="METADATA", metric=metric,
                         metadata={"unit": unit, "format": fmt, **extra})

    def parameters(self, params: Mapping) -> None:
        if not self.enabled:
            return
        params = {k: _jsonable(v) for k, v in params.items()}
        self._record(type="LOG", step="PARAMETER", data=params)

    def log(
        self,
        step: Sequence[int],
        data: Mapping,
        progress: tuple[int, int] | None = None,
        tb_step: int | None = None,
        tb_prefix: str = "train",
        text: str | None = None,
    ) -> None:
        """A per-step (or per-epoch) record; ``progress=(done, total)`` adds a bar and ETA;
        ``text`` is shown instead of the record's fields (the JSON line keeps them all)."""
        if not self.enabled:
            return
        data = {k: _jsonable(v) for k, v in data.items()}
        self._record(type="LOG", step=list(step), data=data)
        head = " ".join(f"{n} {v}" for n, v in zip(("epoch", "step"), step))
        if progress:
            done, total = progress
            head += f"/{total} {_bar(done, total)}"
        if text is None:
            text = " | ".join(f"{k} {_fmt(v)}" for k, v in data.items())
            text = f"{head} | {text}"
        self.print(text)
        if self._tb is not None and tb_step is not None:
            self._scalars(data, tb_step, tb_prefix)

    def _scalars(self, data: Mapping, step: int, prefix: str) -> None:
        import tensorflow as tf
        try:
            with self._tb.as_default(step=step):
                for k, v in data.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        # "eval_top1" under "eval" is "eval/top1", not "eval/eval_top1"
                        name = k[len(prefix) + 1:] if k.startswith(prefix + "_") else k
                        tf.summary.scalar(f"{prefix}/{name}", v)
        except (tf.errors.OpError, OSError) as e:
            _warn(f"TensorBoard summaries stop here ({getattr(e, 'message', e)}); training goes on")
            self._tb = None

    def summary(self, data: Mapping) -> None:
        """The run's final record: DLLogger's empty step, and a block on stdout."""
        if not self.enabled:
            return
        data = {k: _jsonable(v) for k, v in data.items()}
        self._record(type="LOG", step=[], data=data)
        width = max((len(k) for k in data), default=0)
        self.print("summary:")
        for k, v in data.items():
            self.print(f"  {k:<{width}}  {_fmt(v)}")

    def redo_after(self, step: int) -> None:
        """A run that resumes from a checkpoint at ``step`` trains the steps after it again: the
        records an earlier job of the run (one killed after its last checkpoint) logged for
        them move to ``<log>.redone``, so that the log holds each step once. Records before the
        run's start (the last summary of a run that completed, or of another mode) stay."""
        if self._json is None:
            return
        lines = self._json.lines()
        records = {}
        for n, line in enumerate(lines):
            if line.startswith(b"DLLL "):
                with contextlib.suppress(ValueError):
                    records[n] = json.loads(line[5:])
        start = max((n for n, r in records.items() if r.get("step") == []
                     and not r.get("data", {}).get("stopped_by_signal")), default=-1)
        redone = {n for n, r in records.items()
                  if n > start and _is_step_log(r) and r["step"][1] > step}
        if not redone:
            return
        path = self._json.path
        with open(path + ".redone", "ab") as f:  # kept: what the earlier job measured
            f.writelines(lines[n] for n in sorted(redone))
        self._json.rewrite([line for n, line in enumerate(lines) if n not in redone])
        steps = [records[n]["step"][1] for n in redone]
        self.print(f"{path}: {len(redone)} record(s) of steps {min(steps)}-{max(steps)}, logged "
                   f"after the checkpoint this run resumes from (step {step}), moved to "
                   f"{os.path.basename(path)}.redone: those steps are trained again")

    def records(self) -> list[dict]:
        """What this log's file holds so far (nothing where this rank writes none)."""
        if self._json is None:
            return []
        return read_records(self._json.path)

    def print(self, text: str) -> None:
        if self.enabled:
            try:
                print(text, file=self._stream or sys.stdout, flush=True)
            except OSError:  # stdout redirected to a full disk: the JSON log and the run go on
                pass

    def close(self) -> None:
        if self._json is not None:
            self._json.close()
            self._json = None
        if self._tb is not None:
            import tensorflow as tf
            try:
                self._tb.flush()
                self._tb.close()
            except (tf.errors.OpError, OSError):
                pass
            self._tb = None


def read_records(path: str) -> list[dict]:
    """Parses a DLLogger JSON-lines file back into dicts (lines without the prefix are skipped).
    A last line cut short (a process killed while writing it; the next run's logger removes it
    before appending) is left out; any other line that does not parse raises ``ValueError``
    naming the file's line."""
    records = []
    with open(path, "rb") as f:
        raw = f.read().splitlines(keepends=True)
    lines = []
    for n, line in enumerate(raw, 1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError(f"{path}, line {n}: not text (not a DLLogger log?)") from None
    for n, line in enumerate(lines, 1):
        if not line.startswith("DLLL "):
            continue
        try:
            records.append(json.loads(line[5:]))
        except json.JSONDecodeError as e:
            if n == len(lines) and not line.endswith("\n"):
                continue  # cut by a kill
            raise ValueError(f"{path}, line {n}: {e.msg} (column {e.colno + 5})") from None
    return records


def step_logs(records: list[dict]) -> list[dict]:
    """The LOG records of training steps and evaluations: those whose step is (epoch, step)."""
    return [r for r in records if _is_step_log(r)]


def _is_step_log(r: dict) -> bool:
    return r["type"] == "LOG" and isinstance(r.get("step"), list) and len(r["step"]) == 2


def run_jobs(records: list[dict]) -> list[dict]:
    """The jobs of the training run the log ends with, oldest first: a training run stopped by
    a signal (a time limit, a preemption) or killed, and resumed by the next job, is one run over
    several jobs. Each: ``{"summary": ... or None (killed), "train_seconds": ...}``; the run's
    jobs go back to the last one that completed (or was not training)."""
    jobs, current = [], None
    for r in records:
        if r.get("step") == "PARAMETER":
            current = {"mode": r["data"].get("mode"), "summary": None, "steps": []}
            jobs.append(current)
        elif current is not None and r.get("step") == []:
            current["summary"] = r["data"]
        elif current is not None and _is_step_log(r):
            current["steps"].append(r)
    run = []
    for job in reversed(jobs):
        s = job["summary"]
        if not str(job["mode"]).startswith("train") or (
                run and s is not None and not s.get("stopped_by_signal")):
            break  # another mode, or an earlier run that completed
        if s is not None and "train_seconds" in s:
            seconds = float(s["train_seconds"])
        elif len(job["steps"]) > 1:  # killed: the span of its logged steps
            seconds = float(job["steps"][-1]["elapsedtime"]) - float(
                job["steps"][0]["elapsedtime"])
        else:
            seconds = 0.0
        run.append({"summary": s, "train_seconds": seconds})
    return run[::-1]


def last_summary(records: list[dict]) -> dict:
    """The data of the last run's summary (the record with an empty step)."""
    return [r for r in records if r.get("step") == []][-1]["data"]
