"""Triton's ``ModelConfig`` messages for ``--export_triton``, built as dictionaries with the
proto's field names and printed in protobuf's text format (``to_text``).

tritonclient's generated ``model_config_pb2`` needs protobuf 5 or later where NGC 25.02's
TensorFlow has 4, so nothing here imports it; the tests parse every file with that proto in
scripts/triton_env.sh's environment and have a real ``tritonserver`` load them.

Where every tensor leads with the batch, Triton batches requests (``max_batch_size``,
``dynamic_batching``); a value per row is declared ``[1]`` (``reshape`` to the model's ``[]``).
The batching and instance settings (``QUEUE_DELAY_US``, one instance) are chosen from the
serving figures in the model READMEs (``python -m serving.load``).
"""
from __future__ import annotations

import json

DATA_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "int32": "TYPE_INT32",
              "int64": "TYPE_INT64", "string": "TYPE_STRING", "uint8": "TYPE_UINT8",
              "bool": "TYPE_BOOL"}
ONNX_TYPES = {1: "float32", 10: "float16", 6: "int32", 7: "int64", 2: "uint8", 9: "bool",
              8: "string"}

# Dynamic batching as shipped: no waiting for a batch to fill (the requests that queued while
# the model ran go together), one instance a model. Chosen from the serving figures in the
# model READMEs (serving.load on a 2-vCPU host): batching raised ResNet-50's throughput
# by half and Transformer-XL's by a third from concurrency 4 (SSD320's not measurably); a 2 ms
# queue delay gave no more throughput there and cost latency at concurrency 1; a second
# instance only split the same cores (ResNet-50 and SSD320 slower, twice the memory). With no
# delay the preferred batch sizes change nothing (the batch is what has queued), so none is set.
QUEUE_DELAY_US = 0
# How long a Transformer-XL sequence may stay idle before the server releases it (its slot
# and the memory the model keeps for it); a client that comes back later starts anew.
SEQUENCE_IDLE_US = 60_000_000
# The sequences the model keeps a state for at once (``max_sequences``; the start of one more
# is refused with a line, never a silent drop): at most 256, fewer where their states would
# take more than 2 GiB together (Transformer-XL base: n_layer x mem_len x d_model float32 is
# 21 MB with the evaluation's memory of 640, so 102 sequences; 6.3 MB with the training's 192,
# so 256). The sequence batcher's candidate slots are four times the most: a sequence waiting
# for a slot would wait silently (Triton queues it until another sequence ends or idles out),
# and a start the model refuses holds one until the model has ended it (the end request it
# sends itself at once, python_backend/sequence.py), so that refusals in flight leave room.
MAX_SEQUENCES = 256
SEQUENCE_MEMORY = 2 << 30
# What the requests that run together may take while they run (their estimated peak, from the
# export's ``row_bytes``): rows beyond it run in another batch of the same execution. A batch
# of 16 segments of 832 tokens at base would take 6 GB (Transformer-XL: 384 MB a row); 16 of
# the 192 tokens a segment that evaluation and text_client send, 1.1 GB. With the states'
# 2 GiB and the model (0.8 GB of float32 weights), the served model stays within 5 GiB.
BATCH_MEMORY = 2 << 30
SEQUENCE_SLOTS = 4 * MAX_SEQUENCES


def max_sequences(state_bytes: int | None) -> int:
    """How many sequences of ``state_bytes`` each the model keeps at once (at least 16)."""
    if not state_bytes:
        return MAX_SEQUENCES
    return max(16, min(MAX_SEQUENCES, SEQUENCE_MEMORY // state_bytes))


class Enum(str):
    """A protobuf enum value (printed bare, not quoted)."""


def to_text(message: dict, indent: int = 0) -> str:
    """``message`` (field name -> value: str, Enum, bool, int, float, dict for a message, list
    for a repeated field; a map as a list of ``{"key", "value"}`` entries) in protobuf's text
    format."""
    pad = "  " * indent
    lines = []
    for field, value in message.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{field} {{\n{to_text(value, indent + 1)}{pad}}}")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n".join(f"{pad}  {{\n{to_text(v, indent + 2)}{pad}  }}" for v in value)
            lines.append(f"{pad}{field} [\n{items}\n{pad}]")
        elif isinstance(value, list):
            lines.append(f"{pad}{field}: [ {', '.join(_scalar(v) for v in value)} ]")
        else:
            lines.append(f"{pad}{field}: {_scalar(value)}")
    return "".join(line + "\n" for line in lines)


def _scalar(value) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # ASCII with C escapes: what the text format reads
    return str(value)


def batched(inputs, outputs) -> bool:
    """Whether every tensor leads with the batch (any size): Triton can then batch requests."""
    return all(shape and shape[0] is None for _, shape in [*inputs.values(), *outputs.values()])


def tensors(described, is_batched: bool, reshape: bool = True, labels: dict | None = None,
            optional=()):
    """ModelInput/ModelOutput entries, sorted by name. A value per row is ``dims: [1]``
    (Triton's dims cannot be empty), ``reshape``d to the model's ``[]`` where the backend
    reads the config's reshape (not the Python backend's models, which give ``[rows, 1]``)."""
    out = []
    for name, (dtype, shape) in sorted(described.items()):
        dims = shape[1:] if is_batched else shape
        entry = {"name": name, "data_type": Enum(DATA_TYPES[dtype])}
        if is_batched and not dims:
            entry["dims"] = [1]
            if reshape:
                entry["reshape"] = {"shape": []}
        else:
            entry["dims"] = [-1 if d is None else d for d in dims]
        if name in optional:
            entry["optional"] = True
        if labels and name in labels:
            entry["label_filename"] = labels[name]
        out.append(entry)
    return out


def config(name: str, kind: dict, inputs, outputs, max_batch_size: int, *, reshape=True,
           labels=None, cpu=False, warmup=None, count=1) -> dict:
    """A model's ``ModelConfig``: ``kind`` its ``platform`` or ``backend``; ``count`` instances
    (on each GPU, for a model not on the CPU)."""
    is_batched = batched(inputs, outputs)
    c = {"name": name, **kind, "version_policy": {"latest": {"num_versions": 1}},
         "max_batch_size": max_batch_size if is_batched else 0,
         "input": tensors(inputs, is_batched, reshape),
         "output": tensors(outputs, is_batched, reshape, labels)}
    if kind.get("platform") != "ensemble":
        c["instance_group"] = [{"kind": Enum("KIND_CPU" if cpu else "KIND_AUTO"),
                                "count": count}]
        if is_batched:
            c["dynamic_batching"] = {"max_queue_delay_microseconds": QUEUE_DELAY_US}
    if warmup:
        c["model_warmup"] = [warmup]
    return c


def warmup(inputs, is_batched: bool, data_file: str | None = None) -> dict:
    """One warm-up request of one row: random values, zeros for an integer input (token ids:
    random ones would fall outside the vocabulary, and the model would fail to load), or
    ``data_file`` (in ``warmup/``) for a string input."""
    entries = []
    for name, (dtype, shape) in sorted(inputs.items()):
        dims = (shape[1:] if is_batched else shape) or [1]
        value = {"data_type": Enum(DATA_TYPES[dtype]),
                 "dims": [1 if d is None else d for d in dims]}
        if dtype == "string":
            value["input_data_file"] = data_file
        elif dtype.startswith("int"):
            value["zero_data"] = True
        else:
            value["random_data"] = True
        entries.append({"key": name, "value": value})
    return {"name": "one request", "batch_size": 1 if is_batched else 0, "inputs": entries}


def ensemble(name: str, preprocess: str, pre_tensors: tuple, network: str, net_tensors,
             max_batch_size: int, labels=None) -> dict:
    """``name``: encoded images through ``preprocess`` into ``network``."""
    pre_in, pre_out = pre_tensors
    net_in, net_out = net_tensors
    (net_input,) = net_in
    outputs = {**net_out, "valid": pre_out["valid"]}
    c = config(name, {"platform": "ensemble"}, pre_in, outputs, max_batch_size, reshape=False,
               labels=labels)
    c["ensemble_scheduling"] = {"step": [
        {"model_name": preprocess, "model_version": -1,
         "input_map": [{"key": "images", "value": "images"}],
         "output_map": [{"key": "images", "value": "prepared"},
                        {"key": "valid", "value": "valid"}]},
        {"model_name": network, "model_version": -1,
         "input_map": [{"key": net_input, "value": "prepared"}],
         "output_map": [{"key": k, "value": k} for k in sorted(net_out)]}]}
    return c


def sequence(name: str, inputs, outputs, state: tuple[str, str], optional, max_batch_size: int,
             limits: dict | None = None) -> dict:
    """A stateful model on the Python backend (``python_backend/sequence.py``): each request
    of a sequence (one correlation id) carries its own inputs only, the model keeps the state
    between them. The sequence batcher marks a sequence's first and last requests (``START``,
    ``END``), runs requests of up to ``max_batch_size`` sequences together (the oldest
    strategy: each execution takes the oldest request of each waiting sequence, of up to
    ``SEQUENCE_SLOTS`` open sequences), and releases a sequence idle for
    ``SEQUENCE_IDLE_US``, as the model then drops its state. ``limits`` become parameters the
    model checks each request against (``vocab_size``, ``max_segment``, ``max_sequences``;
    ``vocab_sha256`` for clients); without ``max_sequences``, ``MAX_SEQUENCES``."""
    c = config(name, {"backend": "python"}, inputs, outputs, max_batch_size, reshape=False,
               cpu=True)
    c.pop("dynamic_batching", None)
    c["input"] = tensors(inputs, True, False, optional=optional)
    flag = {"int32_false_true": [0, 1]}
    c["sequence_batching"] = {
        "max_sequence_idle_microseconds": SEQUENCE_IDLE_US,
        "control_input": [
            {"name": "START", "control": [{"kind": Enum("CONTROL_SEQUENCE_START"), **flag}]},
            {"name": "END", "control": [{"kind": Enum("CONTROL_SEQUENCE_END"), **flag}]}],
        "oldest": {"max_candidate_sequences": SEQUENCE_SLOTS,
                   "max_queue_delay_microseconds": QUEUE_DELAY_US}}
    state_in, state_out = state
    params = {"state_input": state_in, "state_output": state_out,
              "max_sequences": MAX_SEQUENCES,
              **{k: v for k, v in (limits or {}).items() if v is not None}}
    c["parameters"] = [{"key": k, "value": {"string_value": str(v)}} for k, v in params.items()]
    return c


def stateful(name: str, kind: dict, inputs, outputs, states: dict, max_batch_size: int,
             sequences: int, optional=()) -> dict:
    """A stateful model whose state Triton keeps (implicit state: the ONNX Runtime and TensorRT
    backends, on the GPU): ``states`` maps each state input to the output the model answers
    it with, each of one shape (its ``inputs`` entry without the batch), zeros at a sequence's
    start and fed back at each of its requests, so that a request carries its own inputs only
    and the state never leaves the server's device. The sequence batcher runs the oldest
    request of up to ``max_batch_size`` of ``sequences`` open sequences together and releases
    one idle for ``SEQUENCE_IDLE_US``; ``optional`` inputs may be left out."""
    own_in = {k: v for k, v in inputs.items() if k not in states}
    own_out = {k: v for k, v in outputs.items() if k not in states.values()}
    c = config(name, kind, own_in, own_out, max_batch_size)
    c.pop("dynamic_batching", None)
    c["input"] = tensors(own_in, True, optional=optional)
    kept = []
    for state_in, state_out in states.items():
        dtype, shape = inputs[state_in]
        value = {"data_type": Enum(DATA_TYPES[dtype]), "dims": list(shape[1:])}
        kept.append({"input_name": state_in, "output_name": state_out, **value,
                     "initial_state": [{**value, "zero_data": True, "name": f"no {state_in}"}]})
    c["sequence_batching"] = {
        "max_sequence_idle_microseconds": SEQUENCE_IDLE_US,
        "oldest": {"max_candidate_sequences": sequences,
                   "max_queue_delay_microseconds": QUEUE_DELAY_US},
        "state": kept}
    return c


def onnx_tensors(path: str):
    """(inputs, outputs) of an ONNX file: name -> (dtype name, shape, None = any), as
    ``client.json``'s signatures give them."""
    import onnx
    graph = onnx.load(path, load_external_data=False).graph

    def read(values):
        out = {}
        for v in values:
            t = v.type.tensor_type
            out[v.name] = (ONNX_TYPES[t.elem_type],
                           [d.dim_value if d.HasField("dim_value") else None
                            for d in t.shape.dim])
        return out
    return read(graph.input), read(graph.output)


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
