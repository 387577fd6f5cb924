"""A model's data in sharded TFRecords (``train-*``, ``validation-*``, written by its
``prepare_dataset.py``) as one declared value, as ``CheckpointSpec`` declares a checkpoint and
``ExportSpec`` an export: the check a record must pass, the DALI and tf.data pipelines over the
files, the synthetic batches of a run without data, the preparing script the errors name, and
what follows from them (the file sets, the epoch's size, the bad-record locator). A task makes
one (``common.task.record_data``) and hands it to whoever reads the records: its datasets,
evaluation's and the trainer's error lines, an INT8 export's calibration."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from common.data import input_errors, tfrecord_index


@dataclasses.dataclass(frozen=True)
class RecordData:
    prepare_script: str  # named in the error when no records are found
    synthetic_epoch: int  # examples in a nominal epoch of synthetic data (no --data_dir)
    # What a serialized record must pass (parse, label range, decode): raises if bad.
    check: Callable[[tf.Tensor], tf.Tensor]
    # (files, training) -> this rank's batches of ``files``: the model's DALI pipeline (the
    # files' index files checked first), its tf.data pipeline (this rank's seed; with
    # ``whole=True`` every file's, whatever this rank's share: an INT8 export's calibration).
    dali: Callable[[list[str], bool], Any]
    tfdata: Callable[..., Any]
    synthetic: Callable[[], Any]  # synthetic batches (``common.task.Repeated``)
    data_dir: str | None  # --data_dir (None: synthetic data)
    index_dir: str | None  # --data_idx_dir
    use_dali: bool  # --dali: one decision between the two pipelines
    dist: Any  # the processes (the index files are built on rank 0)

    @property
    def empty_eval_hint(self) -> str:
        return f"the validation records hold no examples: prepare them with {self.prepare_script}"

    def files(self, split: str) -> list[str]:
        """``split``: "train" or "validation"; one complete set of shards."""
        return tfrecord_index.shard_files(self.data_dir, split,
                                          f"prepare them with {self.prepare_script}")

    def dataset(self, split: str, training: bool):
        """This rank's batches of ``split``: DALI's with --dali, its index files built or
        checked first, else tf.data's."""
        files = self.files(split)
        if self.use_dali:
            tfrecord_index.ensure_indexes(files, self.index_dir, self.dist)
            return self.dali(files, training)
        return self.tfdata(files, training)

    def train_dataset(self):
        return self.synthetic() if self.data_dir is None else self.dataset("train", True)

    def train_examples(self) -> int:
        """Records in the training split (the nominal ``synthetic_epoch`` for synthetic data)."""
        if self.data_dir is None:
            return self.synthetic_epoch
        return tfrecord_index.count_records(self.files("train"), self.index_dir)

    def locate_bad_record(self, split: str) -> str | None:
        """After the ``split`` ("train" or "eval") pipeline failed: "<file>, record <n>: <why>"
        for the first bad record (``input_errors.locate_bad_record``); None without data."""
        if self.data_dir is None:
            return None
        files = self.files("train" if split == "train" else "validation")
        return input_errors.locate_bad_record(files, self.check)
