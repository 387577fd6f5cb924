"""Transformer-XL's served sequence model (``python_backend/sequence.py``) run in this process on
the export's own config, with a stand-in for Triton's ``triton_python_backend_utils`` (the real
server runs it in tests/test_serving_sequence.py): the requests Triton hands over at once run
in batches whose estimated peak stays within the config's ``batch_memory`` (16 segments of 832
tokens at base took 5.6 GiB in one batch, and the process kept 4.8 GB of it), with the answers
of one batch; freed memory goes back to the system after a large batch; the next word's
log-probabilities are computed for the last position only."""
import importlib.util
import json
import os
import re
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT


def _backend_utils():
    pb = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        def __init__(self, name, value):
            self._name, self._value = name, np.asarray(value)

        def name(self):
            return self._name

        def as_numpy(self):
            return self._value

    class TritonError:
        def __init__(self, message):
            self._message = message

        def message(self):
            return self._message

    class InferenceResponse:
        def __init__(self, output_tensors=None, error=None):
            self.outputs, self.error = output_tensors or [], error

        def has_error(self):
            return self.error is not None

    class Request:
        def __init__(self, sequence, inputs, start=False, end=False):
            self.sequence = sequence
            self.inputs = {k: Tensor(k, np.asarray([v], np.int32)) for k, v in inputs.items()}
            self.inputs.update(START=Tensor("START", [[int(start)]]),
                               END=Tensor("END", [[int(end)]]))

        def correlation_id(self):
            return self.sequence

        def request_id(self):
            return ""

    pb.Tensor, pb.TritonError, pb.InferenceResponse, pb.Request = (
        Tensor, TritonError, InferenceResponse, Request)
    pb.get_input_tensor_by_name = lambda request, name: request.inputs.get(name)
    pb.triton_string_to_numpy = {"TYPE_INT32": np.int32}.__getitem__
    pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
    return pb


def _model(monkeypatch, repo, **params):
    """The served model as Triton starts it, on ``repo``'s ``cpu/transformerxl`` with its
    parameters (``params`` replacing some)."""
    pb = _backend_utils()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    spec = importlib.util.spec_from_file_location(
        "sequence_model",
        os.path.join(ROOT, "common", "export", "triton", "python_backend", "sequence.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_exit_with_parent", lambda: None)  # no server to watch
    # initialize hides the GPUs from its process (as the stub's); here only for the test
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    text = (repo / "cpu" / "transformerxl" / "config.pbtxt").read_text()
    written = dict(re.findall(r'key: "(\w+)"\n    value \{\n      string_value: "([^"]*)"', text))
    config = {"name": "transformerxl",
              "input": [{"name": "targets", "data_type": "TYPE_INT32", "optional": True},
                        {"name": "tokens", "data_type": "TYPE_INT32"}],
              "sequence_batching": {"max_sequence_idle_microseconds": "60000000"},
              "parameters": {k: {"string_value": str(v)}
                             for k, v in {**written, **params}.items()}}
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config),
                      "model_repository": str(repo / "cpu" / "transformerxl"),
                      "model_version": "1"})
    rows = []
    for names, fn in list(model.signatures.items()):
        def recorded(fn=fn, **feeds):
            rows.append(int(feeds["tokens"].shape[0]))
            return fn(**feeds)
        model.signatures[names] = recorded
    return module, pb, model, rows


def test_requests_run_together_within_the_batch_memory_with_one_batchs_answers(
        monkeypatch, exported_txl):
    """Sixteen sequences' first segments of max_segment tokens, handed over at once: with the
    config as exported (2 GiB) they run as one batch; with a batch memory of five rows'
    estimate, in batches of 5, 5, 5 and 1, each answer the one batch's; the next segments
    (over the memory the first left) likewise. After a batch above TRIM_AFTER the free memory
    is handed back to the system."""
    trainer, _, repo = exported_txl
    longest = trainer.flags.tgt_len + trainer.flags.eval_mem_len
    ids = np.random.default_rng(0).integers(0, trainer.task.cfg.vocab_size, (16, 2, longest + 1))
    written = (repo / "cpu" / "transformerxl" / "config.pbtxt").read_text()
    assert 'key: "batch_memory"\n    value {\n      string_value: "2147483648"' in written
    pair = int(re.search(r'"row_bytes_per_pair"\n    value \{\n      string_value: "(\d+)"',
                         written)[1])
    token = int(re.search(r'"row_bytes_per_token"\n    value \{\n      string_value: "(\d+)"',
                          written)[1])
    first_row = pair * longest * longest + token * longest  # no memory yet

    def run(**params):
        module, pb, model, rows = _model(monkeypatch, repo, **params)
        trimmed = []
        monkeypatch.setattr(module, "_return_free_memory", lambda: trimmed.append(1))
        monkeypatch.setattr(module, "TRIM_AFTER", 3 * first_row)
        out = []
        for segment in range(2):
            responses = model.execute([pb.Request(
                s + 1, {"tokens": ids[s, segment, :-1], "targets": ids[s, segment, 1:]},
                start=segment == 0) for s in range(16)])
            assert not [r for r in responses if r.has_error()], \
                [r.error.message() for r in responses if r.has_error()]
            out.append(np.stack([r.outputs[0].as_numpy()[0] for r in responses]))
        return out, rows, trimmed

    whole, rows, trimmed = run()
    assert rows == [16, 16] and len(trimmed) == 2
    split, rows, trimmed = run(batch_memory=5 * first_row)
    assert rows[:4] == [5, 5, 5, 1], rows
    assert len(rows) > 4 and max(rows[4:]) < 5  # the memory makes the second segments larger
    for a, b in zip(whole, split):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_the_served_limits_fit_the_memory_the_docs_give_at_base_size():
    """At base size (WikiText-103's vocabulary, the evaluation's memory of 640, segments of 832
    tokens), the states the model keeps (max_sequences of them), one batch's estimated peak
    (within BATCH_MEMORY) and the float32 weights stay within the 5 GiB docs/deployment.md
    gives the served model; a batch of 16 full segments is estimated near the 5.6 GiB a fault
    probe measured for it."""
    from common.export.triton.config import BATCH_MEMORY, max_sequences
    from txl.config import TXLConfig
    from txl.exports import WIKITEXT_103_WORDS, segment_bytes
    cfg = TXLConfig(vocab_size=WIKITEXT_103_WORDS)
    state = cfg.n_layer * 640 * cfg.d_model * 4
    row = segment_bytes(cfg)
    full = row["score_pair"] * 832 * (832 + 640) + row["token"] * 832
    assert 5.6 * 2**30 / 16 <= full <= 1.25 * 5.6 * 2**30 / 16
    weights = 191_965_658 * 4
    assert max_sequences(state) * state + BATCH_MEMORY + weights <= 5 * 2**30
    assert BATCH_MEMORY // full >= 5  # long segments still run five at once


@pytest.mark.both_stacks
def test_the_next_words_softmax_runs_on_the_last_position_only(exported_txl):
    """``next_log_prob`` (the served ``serving_default`` and generation) equals ``log_prob``'s
    last position, and each of its log-softmaxes has a row per sequence: the softmax over
    the vocabulary of every position (B x Q x vocab floats, 14 GB for 16 segments of 832
    tokens at base) is not computed to keep one."""
    trainer = exported_txl[0]
    model, cfg = trainer.model, trainer.task.cfg
    tokens = tf.constant(np.random.default_rng(1).integers(0, cfg.vocab_size, (2, 7)), tf.int32)
    mems = model.empty_mems(2)
    np.testing.assert_allclose(model.next_log_prob(tokens, mems)[0].numpy(),
                               model.log_prob(tokens, mems)[0].numpy()[:, -1], atol=1e-5)
    graph = tf.function(lambda t: model.next_log_prob(t, mems)[0], autograph=False) \
        .get_concrete_function(tf.TensorSpec([2, 7], tf.int32)).graph
    softmaxes = [op.outputs[0].shape for op in graph.get_operations()
                 if op.type == "LogSoftmax"]
    assert softmaxes and all(shape[0] == 2 for shape in softmaxes), softmaxes
