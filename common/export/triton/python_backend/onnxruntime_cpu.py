"""A Triton Python-backend model (copied into the repository as ``<name>_python/<v>/model.py``
by ``../repository.py``): the export's ``model.onnx`` (beside this file) run by ONNX
Runtime on the CPU. The same network as ``<name>_onnx``, for a server that has the Python
backend but not the ONNX Runtime one (the ``tritonserver`` that ``nvidia-pytriton`` ships, any
CPU machine): ``cpu/<name>`` is the ensemble over it. Needs ``onnxruntime`` in the Python that
runs the backend (docker/triton-requirements.txt).

Inputs and outputs are the ONNX file's, by name; an output with one value per row leaves as
(rows, 1), as the config declares it. The requests Triton hands over at once run as one batch.
"""
import json
import os

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        here = os.path.join(args["model_repository"], args["model_version"])
        self.session = onnxruntime.InferenceSession(os.path.join(here, "model.onnx"),
                                                    providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        given = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs}
                 for r in requests]
        feeds = {n: np.concatenate([g[n] for g in given]) for n in self.inputs}
        found = self.session.run(self.outputs, feeds)
        found = [v[:, None] if v.ndim == 1 else v for v in found]
        responses, start = [], 0
        for g in given:
            end = start + len(g[self.inputs[0]])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor(n, np.ascontiguousarray(v[start:end]))
                for n, v in zip(self.outputs, found)]))
            start = end
        return responses
