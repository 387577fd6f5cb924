#!/usr/bin/env bash
# SSD320 v1.2 with NVIDIA's recipe (the defaults of main.py) on GPUS GPUs per machine, through
# scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several machines). main.py
# keeps NVIDIA's number of images: 12,500 steps of 8 x 32 = 3.2 M images, i.e. 100,000 steps
# on 1 GPU and 25,000 on 4, as its 1- and 4-GPU configs (the learning rate and warm-up scale
# with the global batch); this script only launches it.
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
# Environment: DATA_DIR (prepare_dataset.py output), RESULTS_DIR, BATCH_SIZE (per GPU; main.py:
# 32), NUM_ITER (steps; main.py: from the global batch), BACKBONE (NVIDIA's start: TF-slim's
# ImageNet resnet_v1_50.ckpt, or its directory; with --trunk resnet_v1.5 a resnet50v1.5
# checkpoint; unset, the trunk starts from random weights and the run says so), LAUNCHER.
set -euo pipefail
. "$(dirname "$0")/../../scripts/train_prelude.sh" /data/coco "$@"
if [ -n "$DATA_DIR" ]; then extra+=(--dali); fi
env_flag BACKBONE --backbone_checkpoint
env_flag BATCH_SIZE --batch_size
env_flag NUM_ITER --num_iter
launch
