# NGC's TensorFlow 2 image already has TensorFlow, Horovod (NCCL + MPI), DALI and OpenMPI;
# scripts/install_deps.sh adds only what it lacks (light Python packages, Keras 3 if needed).
ARG FROM_IMAGE_NAME=nvcr.io/nvidia/tensorflow:25.02-tf2-py3
FROM ${FROM_IMAGE_NAME}

WORKDIR /workspace/tf-model-scripts
COPY requirements.txt ./
COPY scripts/install_deps.sh scripts/
RUN PIP_ROOT_USER_ACTION=ignore bash scripts/install_deps.sh
COPY . .
ENV TF_CPP_MIN_LOG_LEVEL=1
