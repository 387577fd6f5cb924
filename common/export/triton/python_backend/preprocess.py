"""A Triton Python-backend model (copied into the repository as ``<name>_preprocess/<v>/
model.py`` by ``../repository.py``): encoded images in, the network's float input out,
prepared by the export's own TensorFlow function (``model.savedmodel`` beside this file, the
export's ``preprocess/``: the
evaluation's decode, resize, crop and normalisation, the SavedModel's ``serving_default``
less its network). Running TensorFlow itself is what makes the served ensemble answer what the
SavedModel answers, to the last bit of the input; DALI's and Pillow's resizes are not
``tf.image``'s. Needs TensorFlow in the Python that runs the backend
(docker/triton-requirements.txt: docker/Dockerfile.triton's image, scripts/triton_env.sh's).

Inputs ``images`` (rows, 1) bytes; outputs ``images`` (rows, size, size, 3) float32 and
``valid`` (rows, 1) bool: False for an image that could not be decoded (its row zeros; the
other rows, other clients' requests batched with it, are answered). The requests Triton hands
over at once are prepared in one call.
"""
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # decoding is host work
        import tensorflow as tf
        here = os.path.join(args["model_repository"], args["model_version"])
        self.tf = tf
        self.fn = tf.saved_model.load(os.path.join(here, "model.savedmodel")).signatures[
            "serving_default"]

    def execute(self, requests):
        encoded = [pb_utils.get_input_tensor_by_name(r, "images").as_numpy().reshape(-1)
                   for r in requests]
        out = self.fn(images=self.tf.constant(np.concatenate(encoded), self.tf.string))
        images, valid = out["images"].numpy(), out["valid"].numpy()[:, None]
        responses, start = [], 0
        for rows in (len(e) for e in encoded):
            end = start + rows
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("images", images[start:end]),
                pb_utils.Tensor("valid", valid[start:end])]))
            start = end
        return responses
