"""What every model's ``prepare_dataset.py`` shares: the command line (argparse, then one line
on stderr and exit code 1 for data it cannot prepare, never a traceback), and ``staged``, which
writes a preparation beside the previous one and swaps it in only once it is complete."""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator

import tensorflow as tf

from common import files
from common.data import tfrecord_writer
from common.errors import DataError, one_line, say

STAGE = ".preparing"  # inside the output directory: the same file system, so renames are atomic
_SHARD = re.compile(r"^(?P<prefix>.+)-\d{5}-of-\d{5}$")


def add_shards(p: argparse.ArgumentParser, train: int, val: int) -> None:
    """``--train_shards`` and ``--val_shards``, with the model's defaults."""
    p.add_argument("--train_shards", type=int, default=train)
    p.add_argument("--val_shards", type=int, default=val)


def generated(root: str, source: str, records: str | None, made_with: dict,
              export: Callable[[str], object], prepare: Callable[[str, str], object]) -> str:
    """The records of a generated dataset (the digits, the shapes), made once: ``export(src)``
    writes its source in ``root/source``, ``prepare(src, records)`` the records (default
    ``root/records``; returned). ``root/generated.json``, written last, records what they were
    made with: records made otherwise, or a preparation that did not finish, are made again."""
    import json
    records = records or os.path.join(root, "records")
    made_with = {**made_with, "records": os.path.abspath(records)}
    marker = os.path.join(root, "generated.json")
    with contextlib.suppress(OSError, ValueError), open(marker) as f:
        if json.load(f) == made_with:
            return records
    with contextlib.suppress(FileNotFoundError):
        os.remove(marker)
    src = os.path.join(root, source)
    shutil.rmtree(src, ignore_errors=True)
    export(src)
    prepare(src, records)
    files.write_atomically(marker, json.dumps(made_with))
    return records


@contextlib.contextmanager
def staged(out_dir: str, log=print) -> Iterator[str]:
    """Yields a staging directory for the new preparation's files. When the block completes,
    they replace the previous preparation's (a TFRecord shard set replaces every earlier set
    of its prefix, with their index files); when it fails (bad data, a full or read-only disk,
    Ctrl-C), the staging directory goes and ``out_dir`` is left exactly as it was. The disk
    must hold both preparations for the moment of the swap."""
    files.check_output_dir(out_dir, "the output directory", purpose="the output needs")
    stage = os.path.join(out_dir, STAGE)
    shutil.rmtree(stage, ignore_errors=True)  # a killed run's leftovers
    try:
        os.makedirs(stage)
        yield stage
        _swap_in(stage, out_dir, log)
    except (OSError, tf.errors.OpError) as e:  # TFRecordWriter's are TensorFlow's
        why = e.strerror if isinstance(e, OSError) else one_line(e.message).split("; ")[-1]
        st = os.statvfs(out_dir)
        raise DataError(f"cannot write the preparation to {out_dir} ({why or e}; "
                        f"{st.f_bavail * st.f_frsize / 2**20:.1f} MiB free there); the previous "
                        "preparation there is unchanged") from None
    finally:
        with _signals_held():  # a second Ctrl-C must not leave half the staging behind
            shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM ignored inside the block (in the main thread): for the cleanup and
    the last line, which an interrupt must not cut."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _say(line: str) -> None:
    """One whole line on stderr (``say``: one write) that no interrupt cuts short."""
    with _signals_held():
        say(line)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the staging directory is removed on the way out
    (Python's default SIGTERM ends the process without running any cleanup)."""


def _swap_in(stage: str, out_dir: str, log) -> None:
    prefixes = {m.group("prefix") for m in map(_SHARD.match, os.listdir(stage)) if m}
    for prefix in sorted(prefixes):
        tfrecord_writer.remove_stale(out_dir, prefix, log)
    for d, _, names in os.walk(stage):
        target = os.path.join(out_dir, os.path.relpath(d, stage))
        os.makedirs(target, exist_ok=True)
        for f in names:
            os.replace(os.path.join(d, f), os.path.join(target, f))


def main(doc: str, arguments: Callable[[argparse.ArgumentParser], None],
         prepare: Callable[[argparse.Namespace], object],
         argv: Iterable[str] | None = None) -> int:
    """Parses ``argv`` with the model's ``arguments`` and runs its ``prepare``; ``doc``'s first
    paragraph is the help text."""
    # The command as typed: prepare_dataset.py, or the installed forms that entry.main_of names
    # (python -m rn50.prepare, tf-resnet50-prepare).
    typed = sys.argv[0] if argv is None and sys.argv else ""
    prog = typed if typed.startswith(("python -m ", "tf-")) else "prepare_dataset.py"
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    arguments(p)
    args = p.parse_args(argv)

    def terminate(signum, frame):
        raise _Terminated

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminate) if main_thread else None
    try:
        prepare(args)
    except DataError as e:
        _say(f"{p.prog}: error: {e}")
        return 1
    except KeyboardInterrupt as e:
        which = "SIGTERM" if isinstance(e, _Terminated) else "Ctrl-C"
        _say(f"{p.prog}: interrupted ({which}); the previous preparation is unchanged")
        return 143 if isinstance(e, _Terminated) else 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0
