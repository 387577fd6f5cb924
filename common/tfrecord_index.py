"""TFRecord index files (DALI's format: one "offset size" line per record) and record counts.

The scan reads only the 8-byte length headers and seeks past each record, so it is fast even on
ImageNet, and a truncated file is caught here with its name instead of mid-training.
"""
from __future__ import annotations

import os
import struct
from typing import Sequence

from common.errors import DataError


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


def count_records(files: Sequence[str], idx_dir: str | None = None) -> int:
    """Records in ``files``, from their index files where present, else by scanning."""
    total = 0
    for path in files:
        idx = index_path(idx_dir, path) if idx_dir else None
        if idx and os.path.exists(idx):
            with open(idx) as f:
                total += sum(1 for line in f if line.strip())
        else:
            total += len(scan(path))
    return total


def missing_indexes(files: Sequence[str], idx_dir: str) -> list[str]:
    return [p for p in files if not os.path.exists(index_path(idx_dir, p))]
