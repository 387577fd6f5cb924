"""A Triton Python-backend model (copied into the repository as ``<name>/<v>/model.py`` by
``common/export/triton.py``): a SavedModel whose signatures carry a state from one call to
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
* The requests Triton hands over at once (the sequence batcher's oldest strategy: one from
  each of several sequences) run as one batch where their signature, inputs' shapes and
  states' shapes agree, else in groups that do.
* A sequence's state is dropped at its last request (the end flag) and when it has been idle
  for the config's ``max_sequence_idle_microseconds``, when Triton releases the sequence too
  (a later request of it without the start flag is refused by Triton).

Needs TensorFlow in the Python that runs the backend (docker/triton-requirements.txt;
scripts/triton_env.sh's).
"""
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        import tensorflow as tf
        self.tf = tf
        config = json.loads(args["model_config"])
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
        idle = config.get("sequence_batching", {}).get("max_sequence_idle_microseconds")
        self.idle_s = int(idle) / 1e6 if idle else None
        self.states = {}  # correlation id -> (state of one row, when last used)
        self.inputs = [i["name"] for i in config["input"]]

    def execute(self, requests):
        now = time.monotonic()
        if self.idle_s:
            for key in [k for k, (_, used) in self.states.items() if now - used > self.idle_s]:
                del self.states[key]
        responses = [None] * len(requests)
        groups = {}
        for n, request in enumerate(requests):
            try:
                key, given, state = self._read(request)
            except ValueError as e:
                responses[n] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e)))
                continue
            names = frozenset(given)
            shape = (names, tuple((k, v.shape) for k, v in sorted(given.items())), state.shape)
            groups.setdefault(shape, []).append((n, key, given, state, request))
        for (names, _, _), members in groups.items():
            fn = self.signatures[names]
            feeds = {k: np.concatenate([m[2][k] for m in members]) for k in names}
            feeds[self.state_in] = np.concatenate([m[3] for m in members], self.batch_axis)
            out = {k: v.numpy() for k, v in fn(**{k: self.tf.constant(v)
                                                   for k, v in feeds.items()}).items()}
            new = out.pop(self.state_out)
            for row, (n, key, _, _, request) in enumerate(members):
                self.states[key] = (np.take(new, [row], self.batch_axis), now)
                if self._flag(request, "END"):
                    del self.states[key]
                responses[n] = pb_utils.InferenceResponse([
                    pb_utils.Tensor(k, np.ascontiguousarray(v[row:row + 1]))
                    for k, v in sorted(out.items())])
        return responses

    def _read(self, request):
        """(correlation id, the inputs given, the state this request starts from)."""
        key = request.correlation_id()
        given = {}
        for name in self.inputs:
            t = pb_utils.get_input_tensor_by_name(request, name)
            if t is not None:
                given[name] = t.as_numpy()
        if frozenset(given) not in self.signatures:
            raise ValueError("give one of the input sets " + " or ".join(
                "(" + ", ".join(sorted(s)) + ")" for s in self.signatures))
        if self._flag(request, "START"):
            return key, given, np.zeros(self.empty, self.dtype)
        if key not in self.states:
            raise ValueError(f"sequence {key} has no state here: start it with the "
                             "sequence-start flag")
        return key, given, self.states[key][0]

    @staticmethod
    def _flag(request, name) -> bool:
        t = pb_utils.get_input_tensor_by_name(request, name)
        return t is not None and bool(t.as_numpy().reshape(-1)[0])
