"""TFRecord index files (DALI's format: one "offset size" line per record) and record counts.

The scan reads only the 8-byte length headers and seeks past each record, so it is fast even on
ImageNet, and a truncated file is caught here with its name instead of mid-training. An index
file is only trusted after ``index_problem`` found it to describe its TFRecord: offsets that start
at 0, follow each other and end exactly at the file's size, and record headers that agree with
the sizes at the first, middle and last records. An empty, garbled, truncated or stale index
(its TFRecord was rewritten) fails that check; DALI would otherwise abort with a C++ stack or
silently read half a shard.
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
from collections.abc import Sequence

from common.errors import DataError, one_line

_SHARD = re.compile(r"^(?P<split>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})$")


def scan(path: str) -> list[tuple[int, int]]:
    """(offset, size) of every record in a TFRecord file."""
    records, size = [], os.path.getsize(path)
    with open(path, "rb") as f:
        offset = 0
        while offset < size:
            header = f.read(12)  # uint64 length + uint32 crc of the length
            if len(header) < 12:
                raise DataError(f"{path} is truncated or not a TFRecord file (at byte {offset})")
            (length,) = struct.unpack("<Q", header[:8])
            end = offset + 12 + length + 4  # data + uint32 crc of the data
            if end > size:
                raise DataError(f"{path} is truncated or not a TFRecord file (record at byte "
                                f"{offset} claims {length} bytes)")
            records.append((offset, end - offset))
            f.seek(end)
            offset = end
    return records


def index_path(idx_dir: str, tfrecord: str) -> str:
    return os.path.join(idx_dir, os.path.basename(tfrecord) + ".idx")


def write_index(tfrecord: str, idx_file: str) -> int:
    records = scan(tfrecord)
    tmp = idx_file + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(f"{offset} {size}\n" for offset, size in records)
    os.replace(tmp, idx_file)  # a killed run never leaves a half-written index behind
    return len(records)


def read_index(idx_file: str) -> list[tuple[int, int]]:
    entries = []
    with open(idx_file, "rb") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise ValueError(f"line {n} is not '<offset> <size>'")
            entries.append((int(parts[0]), int(parts[1])))
    return entries


def _checked_index(tfrecord: str, idx_file: str):
    """(the index's entries, None) when ``idx_file`` describes ``tfrecord``, else (None, why)."""
    if not os.path.exists(idx_file):
        return None, "missing"
    try:
        entries = read_index(idx_file)
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"not an index file ({e})"
    size = os.path.getsize(tfrecord)
    if not entries:
        return (entries, None) if not size else (None, "empty")
    expected = 0
    for offset, length in entries:
        if offset != expected or length < 16:
            return None, "stale or garbled (its offsets do not follow each other)"
        expected = offset + length
    if expected != size:
        return None, f"stale or truncated (it covers {expected} of the file's {size} bytes)"
    with open(tfrecord, "rb") as f:
        for offset, length in {entries[0], entries[len(entries) // 2], entries[-1]}:
            f.seek(offset)
            (data_len,) = struct.unpack("<Q", f.read(8))
            if data_len + 16 != length:
                return None, "stale (a record header disagrees with it)"
    return entries, None


def index_problem(tfrecord: str, idx_file: str) -> str | None:
    """Why ``idx_file`` does not describe ``tfrecord`` (None when it does, or a short reason)."""
    return _checked_index(tfrecord, idx_file)[1]


def count_records(files: Sequence[str], idx_dir: str | None = None) -> int:
    """Records in ``files``, from their index files where those are valid, else by scanning."""
    total = 0
    for path in files:
        entries = _checked_index(path, index_path(idx_dir, path))[0] if idx_dir else None
        total += len(entries if entries is not None else scan(path))
    return total


def invalid_indexes(files: Sequence[str], idx_dir: str) -> dict[str, str]:
    """{tfrecord: reason} for every file whose index is missing or does not describe it."""
    problems = {}
    for path in files:
        reason = index_problem(path, index_path(idx_dir, path))
        if reason:
            problems[path] = reason
    return problems


def shard_files(data_dir: str, split: str, hint: str) -> list[str]:
    """The ``<split>-NNNNN-of-MMMMM`` files of one complete shard set, sorted.

    Leftover ``*.tmp`` files of an interrupted preparation never match; shards of two different
    counts (a stale set beside a new one) or a set with a gap stop the run with one line."""
    sets: dict[int, list[tuple[int, str]]] = {}
    for name in sorted(os.listdir(data_dir)):
        m = _SHARD.match(name)
        if m and m.group("split") == split:
            sets.setdefault(int(m.group("n")), []).append((int(m.group("i")),
                                                           os.path.join(data_dir, name)))
    if not sets:
        raise DataError(f"no {split}-NNNNN-of-NNNNN TFRecord files in {data_dir} ({hint})")
    if len(sets) > 1:
        counts = ", ".join(f"-of-{n:05d}" for n in sorted(sets))
        raise DataError(f"{data_dir} holds {split} shards of {len(sets)} different sets "
                        f"({counts}): remove the stale ones or prepare the data again")
    (count, shards), = sets.items()
    missing = sorted(set(range(count)) - {i for i, _ in shards})
    if missing:
        raise DataError(f"{data_dir} lacks {len(missing)} of the {count} {split} shards "
                        f"(first: {split}-{missing[0]:05d}-of-{count:05d})")
    return [path for _, path in shards]


def ensure_indexes(files, idx_dir: str, dist) -> None:
    """Builds missing index files and rebuilds those that do not describe their TFRecord
    (empty, garbled, truncated, stale) on rank 0, or stops every rank with one line."""
    problems = invalid_indexes(files, idx_dir)

    def build():
        try:
            os.makedirs(idx_dir, exist_ok=True)
            for path in problems:
                write_index(path, index_path(idx_dir, path))
        except OSError as e:
            raise DataError(f"--dali needs index files in {idx_dir} and they cannot be written "
                            f"({e.strerror}); make them with prepare_dataset.py or set "
                            "--data_idx_dir") from None
        missing = [p for p, why in problems.items() if why == "missing"]
        stale = {p: why for p, why in problems.items() if why != "missing"}
        if missing:
            print(f"dali: built {len(missing)} missing index file(s) in {idx_dir}", flush=True)
        for path, why in stale.items():
            print(f"dali: rebuilt {os.path.basename(path)}.idx in {idx_dir}: it was {why}",
                  flush=True)

    if problems:
        dist.on_chief(build, "building the DALI index files")
    # Every rank checks its share of the files, so the first run over a large split is not
    # one rank reading all of it while the others wait.
    error = verify_checksums(files[dist.rank::dist.size], idx_dir)
    if dist.any(error is not None):
        raise DataError(error or "a TFRecord checksum failed on another rank (see its message)")
    still = invalid_indexes(files, idx_dir)
    if still:
        path, why = next(iter(still.items()))
        raise DataError(f"DALI index file {index_path(idx_dir, path)} is {why} "
                        "(is --data_idx_dir on a shared file system?)")


def _stamp(tfrecord: str) -> str:
    st = os.stat(tfrecord)
    return f"{st.st_size} {st.st_mtime_ns}\n"


def _stamp_files(tfrecord: str, idx_dir: str) -> list[str]:
    """Where a file's checked-stamp may be: beside its index, else (a read-only index
    directory, a ``:ro`` mount) in this user's cache, named after the file's real path."""
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "tf-model-scripts", "crc-ok")
    key = hashlib.sha1(os.path.realpath(tfrecord).encode()).hexdigest()[:16]
    return [index_path(idx_dir, tfrecord)[: -len(".idx")] + ".crc-ok",
            os.path.join(cache, f"{os.path.basename(tfrecord)}-{key}.crc-ok")]


def verify_checksums(files: Sequence[str], idx_dir: str) -> str | None:
    """DALI's reader does not check the records' CRCs, which tf.data does: every file is read
    through tf.data once, and a file that passed gets a stamp (its size and modification time,
    ``_stamp_files``) so later runs skip it until it changes. Returns the one-line error for
    the first bad record (naming the file and the record, as the tf.data pipeline does), or
    None."""
    import tensorflow as tf

    for path in files:
        stamps = _stamp_files(path, idx_dir)
        if any(_read(stamp) == _stamp(path) for stamp in stamps):
            continue
        n = 0
        try:
            for _ in tf.data.TFRecordDataset(path):
                n += 1
        except tf.errors.OpError as e:
            return f"cannot read the input data: {path}, record {n}: {one_line(e.message)}"
        for stamp in stamps:
            try:
                os.makedirs(os.path.dirname(stamp), exist_ok=True)
                with open(stamp + ".tmp", "w") as f:
                    f.write(_stamp(path))
                os.replace(stamp + ".tmp", stamp)
                break
            except OSError:
                continue  # read-only: the next place
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
