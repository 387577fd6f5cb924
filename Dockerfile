# The default image: NVIDIA's last TensorFlow container (25.02: TensorFlow 2.17, Horovod with
# NCCL and MPI, DALI, OpenMPI, TF-TRT). scripts/install_deps.sh adds only what it lacks (light
# Python packages, and Keras 3.15 over the image's 3.3.2) and never changes numpy, protobuf,
# TensorFlow, Horovod or DALI. For current TensorFlow, or GPUs the 25.02 image cannot serve,
# see docker/Dockerfile.cuda.
ARG FROM_IMAGE_NAME=nvcr.io/nvidia/tensorflow:25.02-tf2-py3
FROM ${FROM_IMAGE_NAME}

WORKDIR /workspace/tf-model-scripts
COPY requirements.txt requirements-test.txt requirements-profile.txt requirements.lock requirements-cuda.lock ./
COPY common/__init__.py common/versions.py common/errors.py common/
COPY common/runtime/__init__.py common/runtime/quiet_start.py common/runtime/
COPY scripts/install_deps.sh scripts/
# The stack in a layer of its own (code changes do not redo it), then this repository, editable.
RUN PIP_ROOT_USER_ACTION=ignore INSTALL_DEPS_STACK_ONLY=1 bash scripts/install_deps.sh
COPY . .
# The commit the image holds (.git stays out of it): docker/build.sh passes it, and the version
# and the model cards say it (tf_model_scripts/version.py).
ARG GIT_COMMIT=""
ARG GIT_DIRTY=false
RUN if [ -n "$GIT_COMMIT" ]; then printf '{"commit": "%s", "dirty": %s}\n' "$GIT_COMMIT" \
      "$GIT_DIRTY" > tf_model_scripts/_build.json; fi && \
    PIP_ROOT_USER_ACTION=ignore bash scripts/install_deps.sh
ENV TF_CPP_MIN_LOG_LEVEL=1
