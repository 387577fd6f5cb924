"""A Triton Python-backend model (copied into the repository as ``<name>/<v>/model.py`` by
``../repository.py``): a SavedModel whose signatures carry a state from one call to
the next (Transformer-XL's memory: ``mems`` in, ``new_mems`` out), served as a sequence. A
client sends each request of a sequence (one correlation id) with its own inputs only, the
first with the sequence-start flag; the state stays here, per sequence, between requests.

* Each request picks the signature whose inputs, the state aside, are the ones it sent
  (Transformer-XL: ``tokens`` -> ``serving_default``'s next-word ``log_probs``; ``tokens`` and
  ``targets`` -> ``score``'s ``nll``); its response holds that signature's outputs, the state
  aside.
* A sequence starts from the empty state: zeros of the state's shape with one row on its batch
  axis (``state_batch_axis``) and no entry on the other axes of unknown size (Transformer-XL:
  no memory yet).
* A request is checked alone before anything runs, against the config's parameters: one row,
  a segment of 1 to ``max_segment`` positions, its inputs of one length, ids in
  ``[0, vocab_size)``. What fails is that request's own error, in one line naming the input
  and the limit.
* The requests Triton hands over at once (the sequence batcher's oldest strategy: one from
  each of several sequences) run as one batch where their signature, inputs' shapes and
  states' shapes agree, else in groups that do; a group that fails runs again one request at
  a time, so that one request's failure is its own. A sequence's state changes only when its
  own request is answered: a request refused or failed leaves it as it was.
* At most ``max_sequences`` sequences hold a state here at once: the start of one more is
  refused with a line saying so, never a silent drop of another. A sequence refused at its
  start is ended in Triton's sequence batcher at once (a request with the end flag that this
  model sends itself), so refused starts do not hold the batcher's slots. A sequence's state is
  dropped at its last request (the end flag, answered or not) and when it has been idle for
  the config's ``max_sequence_idle_microseconds``, when Triton releases the sequence too (a
  later request of it without the start flag is refused by Triton).
* The process ends when the server that started it is gone (a server killed with SIGKILL
  cannot stop its backend processes itself), by a watch in a process of its own.

Needs TensorFlow in the Python that runs the backend (docker/triton-requirements.txt;
scripts/triton_env.sh's).
"""
import json
import os
import queue
import re
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

# The request id of the requests that end a refused sequence (TritonPythonModel._end_sequences).
ENDING = "end-of-refused-sequence"


class RequestError(ValueError):
    """What is wrong with one request, in one line (its response's error)."""


class TritonPythonModel:
    def initialize(self, args):
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        _exit_with_parent()
        import tensorflow as tf
        self.tf = tf
        config = json.loads(args["model_config"])
        self.name = config["name"]
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.state_in, self.state_out = params["state_input"], params["state_output"]
        here = os.path.join(args["model_repository"], args["model_version"])
        loaded = tf.saved_model.load(os.path.join(here, "model.savedmodel"))
        self.signatures = {}  # frozenset of input names (state aside) -> signature
        for fn in loaded.signatures.values():
            names = set(fn.structured_input_signature[1])
            if self.state_in in names:
                self.signatures[frozenset(names - {self.state_in})] = fn
                spec = fn.structured_input_signature[1][self.state_in]
        self.batch_axis = int(params.get("state_batch_axis", 1))
        self.empty = [1 if a == self.batch_axis else (0 if d is None else d)
                      for a, d in enumerate(spec.shape)]
        self.dtype = spec.dtype.as_numpy_dtype
        # The state's axes that grow (Transformer-XL: its memory's positions).
        self.grow_axes = [a for a, d in enumerate(spec.shape)
                          if d is None and a != self.batch_axis]
        self.row_bytes = (float(params.get("row_bytes_per_pair", 0)),
                          float(params.get("row_bytes_per_token", 0)))
        self.batch_memory = float(params.get("batch_memory", 0))
        idle = config.get("sequence_batching", {}).get("max_sequence_idle_microseconds")
        self.idle_s = int(idle) / 1e6 if idle else None
        self.vocab_size = int(params["vocab_size"]) if "vocab_size" in params else None
        self.max_segment = int(params["max_segment"]) if "max_segment" in params else None
        self.max_sequences = int(params["max_sequences"]) if "max_sequences" in params \
            else None
        self.states = {}  # correlation id -> (state of one row, when last used)
        self.inputs = [i["name"] for i in config["input"]]
        # What a request that only ends a sequence carries: each required input, one token.
        self.end_inputs = [(i["name"], pb_utils.triton_string_to_numpy(i["data_type"]))
                           for i in config["input"] if not i.get("optional")]
        self.ending = queue.SimpleQueue()
        threading.Thread(target=self._end_sequences, name="end-refused-sequences",
                         daemon=True).start()

    def execute(self, requests):
        now = time.monotonic()
        if self.idle_s:
            for key in [k for k, (_, used) in self.states.items() if now - used > self.idle_s]:
                del self.states[key]
        responses = [None] * len(requests)
        groups, opening = {}, set()
        for n, request in enumerate(requests):
            if request.request_id() == ENDING:  # _end_sequences': Triton ends it
                self.states.pop(request.correlation_id(), None)
                responses[n] = _error(RequestError("ended after its refused request"))
                continue
            try:
                key, given, state = self._read(request, opening)
            except RequestError as e:
                responses[n] = _error(e)
                if self._flag(request, "END"):  # Triton releases the sequence
                    self.states.pop(request.correlation_id(), None)
                continue
            names = frozenset(given)
            shape = (names, tuple((k, v.shape) for k, v in sorted(given.items())), state.shape)
            groups.setdefault(shape, []).append((n, key, given, state, request))
        ran = 0
        for (names, _, _), group in groups.items():
            rows, peak = self._rows_at_once(group[0][2], group[0][3])
            ran = max(ran, peak * min(rows, len(group)))
            answers = [a for at in range(0, len(group), rows)
                       for a in self._run(self.signatures[names], group[at:at + rows])]
            for member, answer in answers:
                n, key, _, _, request = member
                if isinstance(answer, Exception):
                    responses[n] = _error(answer)
                else:
                    out, new = answer
                    self.states[key] = (new, now)
                    responses[n] = pb_utils.InferenceResponse([
                        pb_utils.Tensor(k, np.ascontiguousarray(v))
                        for k, v in sorted(out.items())])
                if self._flag(request, "END"):
                    self.states.pop(key, None)
        for request, response in zip(requests, responses):
            key = request.correlation_id()
            if response.has_error() and key not in self.states and \
                    not self._flag(request, "END") and request.request_id() != ENDING:
                self.ending.put(key)
        if ran > TRIM_AFTER:
            _return_free_memory()
        return responses

    def _rows_at_once(self, given: dict, state) -> tuple[int, float]:
        """(how many requests of these inputs and this state run together, the estimated
        peak bytes of one): as many as keep their estimated peak within ``batch_memory`` (at
        least one), from the config's ``row_bytes_per_pair`` x q x (q + m) +
        ``row_bytes_per_token`` x q for a segment of q tokens over m positions of memory."""
        q = max(v.shape[-1] for v in given.values())
        m = int(np.prod([state.shape[a] for a in self.grow_axes]))
        peak = self.row_bytes[0] * q * (q + m) + self.row_bytes[1] * q
        if not self.batch_memory or not peak:
            return 1 << 30, peak
        return max(1, int(self.batch_memory // peak)), peak

    def _end_sequences(self):
        """Ends, in Triton's sequence batcher, each sequence that holds no state here after
        its request was refused (a start beyond ``max_sequences``, a bad first request): the
        batcher gives a sequence a slot at its start and frees it only at its end or after
        the idle timeout, so refused starts would hold the slots that new sequences need
        (they then wait, silently, for the timeout). The end is a request of this model with
        the end flag (one token each), sent here, in a thread of its own, after the refusal's
        ``execute`` has returned, that this model answers with an error, running nothing (a
        client that started the sequence again in between finds it ended: Triton's error
        asks for a start, never an answer from another state)."""
        while True:
            key = self.ending.get()
            try:
                pb_utils.InferenceRequest(
                    model_name=self.name, correlation_id=key, request_id=ENDING,
                    flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
                    inputs=[pb_utils.Tensor(n, np.zeros([1, 1], t)) for n, t in self.end_inputs],
                    requested_output_names=[]).exec()
            except Exception:  # noqa: BLE001  (the server is going: its batcher with it)
                pass

    def _run(self, fn, members):
        """(member, (outputs of its row, its new state) or the exception) for each member:
        as one batch, and one at a time where the batch fails."""
        feeds = {k: np.concatenate([m[2][k] for m in members]) for k in members[0][2]}
        feeds[self.state_in] = np.concatenate([m[3] for m in members], self.batch_axis)
        try:
            out = {k: v.numpy() for k, v in fn(**{k: self.tf.constant(v)
                                                   for k, v in feeds.items()}).items()}
        except Exception as e:  # noqa: BLE001  (TensorFlow's errors: the request's answer)
            if len(members) == 1:
                return [(members[0], RequestError(_first_line(e)))]
            return [answer for m in members for answer in self._run(fn, [m])]
        new = out.pop(self.state_out)
        return [(m, ({k: v[row:row + 1] for k, v in out.items()},
                     np.take(new, [row], self.batch_axis)))
                for row, m in enumerate(members)]

    def _read(self, request, opening: set):
        """(correlation id, the inputs given, the state this request starts from); a
        ``RequestError`` for what the request cannot be."""
        key = request.correlation_id()
        given = {}
        for name in self.inputs:
            t = pb_utils.get_input_tensor_by_name(request, name)
            if t is not None:
                given[name] = t.as_numpy()
        if frozenset(given) not in self.signatures:
            raise RequestError("give one of the input sets " + " or ".join(
                "(" + ", ".join(sorted(s)) + ")" for s in self.signatures))
        self._check(given)
        if self._flag(request, "START"):
            if key not in self.states and self.max_sequences is not None and \
                    len(self.states) + len(opening) >= self.max_sequences:
                raise RequestError(
                    f"{self.name} holds {len(self.states) + len(opening)} open sequences, its "
                    f"limit (max_sequences {self.max_sequences} in config.pbtxt): end one (the "
                    "sequence-end flag) or wait until one has been idle "
                    f"{self.idle_s or 0:g} s, then start again")
            opening.add(key)
            return key, given, np.zeros(self.empty, self.dtype)
        if key not in self.states:
            raise RequestError(f"sequence {key} has no state here: start it with the "
                               "sequence-start flag")
        return key, given, self.states[key][0]

    def _check(self, given: dict) -> None:
        """One row, a segment of 1 to ``max_segment`` positions, every input of one length,
        integer ids within the vocabulary."""
        lengths = set()
        for name, value in sorted(given.items()):
            if value.ndim != 2 or value.shape[0] != 1:
                raise RequestError(f"{name}: one row a request (a sequence is one text), "
                                   f"not shape {list(value.shape)}")
            lengths.add(value.shape[1])
            if value.shape[1] == 0:
                raise RequestError(f"{name} is empty: a segment holds at least one token")
            if self.max_segment is not None and value.shape[1] > self.max_segment:
                raise RequestError(
                    f"{name}: a segment of {value.shape[1]} tokens is longer than "
                    f"{self.name}'s maximum of {self.max_segment} (max_segment in "
                    "config.pbtxt): send the text in shorter segments of one sequence")
            if self.vocab_size is not None and np.issubdtype(value.dtype, np.integer):
                bad = (value < 0) | (value >= self.vocab_size)
                if bad.any():
                    at = int(np.argmax(bad.reshape(-1)))
                    raise RequestError(
                        f"{name}: id {int(value.reshape(-1)[at])} at position {at} is not in "
                        f"[0, {self.vocab_size}), the vocabulary of {self.name}")
        if len(lengths) > 1:
            raise RequestError(f"{' and '.join(sorted(given))} differ in length "
                               f"({', '.join(str(given[k].shape[1]) for k in sorted(given))}): "
                               "each target is the token after its token")

    @staticmethod
    def _flag(request, name) -> bool:
        t = pb_utils.get_input_tensor_by_name(request, name)
        return t is not None and bool(t.as_numpy().reshape(-1)[0])


# After a batch estimated above this, the memory freed is handed back to the system: glibc keeps
# what a large batch freed (gigabytes at base) for the process's next allocations otherwise.
TRIM_AFTER = 256 << 20


def _return_free_memory() -> None:
    """glibc's ``malloc_trim(0)``: the free memory of the heap back to the system (TensorFlow's
    CPU tensors come from malloc). Nothing where the C library is not glibc."""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _first_line(e: Exception) -> str:
    """The line that says what failed: a TensorFlow error's message without its wrapping
    ("Graph execution error:", "Detected at node ... defined at" and its traceback, which the
    message follows; the op and node names), else the error's first line."""
    text = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]|\[\[[^\]]*\]\]", "",
                  getattr(e, "message", None) or str(e))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if "Detected at node" in text:
        lines = lines[-1:]
    return lines[0][:500] if lines else type(e).__name__


def _error(e: Exception):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(_first_line(e)))


# The watch over the server, in a shell of its own: the stub's threads cannot be it (its main
# thread, blocked on the dead server's shared memory, holds the interpreter, and the stub's own
# check of its parent then waits for it too), and the kernel's PR_SET_PDEATHSIG fires when the
# server's *thread* that started the stub ends, which the server does not promise to outlive.
# Every second: is the stub's parent still the server? Once it is not (the server is gone and
# the stub was given to init or a subreaper), SIGKILL to the stub; the watch also ends when
# the stub has ended (model unloaded) or is a zombie.
WATCH = """
stub=$1 server=$2
while read -r _ _ state parent _ < "/proc/$stub/stat" 2>/dev/null \
    && [ "$state" != Z ] && [ "$parent" = "$server" ]; do
  sleep 1
done
[ "$parent" != "$server" ] && [ "$state" != Z ] && kill -9 "$stub" 2>/dev/null
exit 0
"""


def _exit_with_parent() -> None:
    """Ends this process once the server that started it is gone, whatever this process is
    doing: a server killed with SIGKILL cannot stop it, and the memory it holds would outlive
    the server (``WATCH``)."""
    import subprocess
    subprocess.Popen(["/bin/sh", "-c", WATCH, "exit-with-server", str(os.getpid()),
                      str(os.getppid())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
