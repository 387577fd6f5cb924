"""Run logs in three forms, written by rank 0 only.

* JSON lines in NVIDIA DLLogger's format (``DLLL {json}``), so existing parsers read them:
  METADATA records (units and formats), one PARAMETER record with every flag, LOG records with
  ``step: [epoch, global_step]`` and a final summary with ``step: []``.
* Readable stdout: one line per logged step, with a progress bar and ETA when the length is known.
* TensorBoard scalars for every numeric value of a per-step record.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time
from typing import Mapping, Optional, Sequence, TextIO

import tensorflow as tf


def _jsonable(value):
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Infinity; DLLogger writes them as strings as well
    return value


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.1f}"
    return str(value)


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * min(done, total) / max(total, 1))
    return f"[{'#' * filled}{'.' * (width - filled)}] {100 * done / max(total, 1):3.0f}%"


class Logger:
    def __init__(
        self,
        enabled: bool = True,
        json_path: Optional[str] = None,
        tensorboard_dir: Optional[str] = None,
        stream: TextIO = sys.stdout,
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
            self._json = open(json_path, "a", buffering=1)
        if tensorboard_dir:
            self._tb = tf.summary.create_file_writer(tensorboard_dir)

    # --- DLLogger records -------------------------------------------------------------------
    def _record(self, **fields) -> None:
        if self._json is None:
            return
        now = time.time()
        line = {
            "timestamp": str(now),
            "datetime": str(datetime.datetime.fromtimestamp(now)),
            "elapsedtime": str(now - self._start),
            **fields,
        }
        self._json.write("DLLL " + json.dumps(line) + "\n")

    def metadata(self, metric: str, unit: Optional[str] = None, fmt: str = ":.4f", **extra) -> None:
        if self.enabled:
            self._record(type="METADATA", metric=metric, metadata={"unit": unit, "format": fmt, **extra})

    def parameters(self, params: Mapping) -> None:
        if not self.enabled:
            return
        params = {k: _jsonable(v) for k, v in params.items()}
        self._record(type="LOG", step="PARAMETER", data=params)

    def log(
        self,
        step: Sequence[int],
        data: Mapping,
        progress: Optional[tuple[int, int]] = None,
        tb_step: Optional[int] = None,
        tb_prefix: str = "train",
    ) -> None:
        """A per-step (or per-epoch) record; ``progress=(done, total)`` adds a bar and ETA."""
        if not self.enabled:
            return
        data = {k: _jsonable(v) for k, v in data.items()}
        self._record(type="LOG", step=list(step), data=data)
        head = " ".join(f"{n} {v}" for n, v in zip(("epoch", "step"), step))
        if progress:
            done, total = progress
            head += f"/{total} {_bar(done, total)}"
        text = " | ".join(f"{k} {_fmt(v)}" for k, v in data.items())
        self.print(f"{head} | {text}")
        if self._tb is not None and tb_step is not None:
            with self._tb.as_default(step=tb_step):
                for k, v in data.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        tf.summary.scalar(f"{tb_prefix}/{k}", v)

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

    def print(self, text: str) -> None:
        if self.enabled:
            print(text, file=self._stream, flush=True)

    def close(self) -> None:
        if self._json is not None:
            self._json.close()
            self._json = None
        if self._tb is not None:
            self._tb.flush()
            self._tb.close()
            self._tb = None


def read_records(path: str) -> list[dict]:
    """Parses a DLLogger JSON-lines file back into dicts (lines without the prefix are skipped)."""
    records = []
    with open(path) as f:
        for line in f:
            if line.startswith("DLLL "):
                records.append(json.loads(line[5:]))
    return records
