#!/usr/bin/env python
"""ImageNet weights users already have, as a ResNet-50 v1.5 checkpoint of this repository.

    python import_weights.py resnet50.safetensors /ckpt/rn50-tv --from torchvision
    python import_weights.py /ngc/nvidia_rn50_tf_amp/model.ckpt-112603 /ckpt/rn50-nv --from nvidia
    python import_weights.py resnet50_weights_tf_dim_ordering_tf_kernels.h5 /ckpt/rn50-k \\
        --from keras --num_classes 10

Then ``main.py --mode evaluate --model_dir OUT``, ``--finetune_checkpoint OUT``, or SSD320's
``--trunk resnet_v1.5 --backbone_checkpoint OUT``. Sources and layouts: rn50/pretrained.py.
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then rn50.pretrained:main.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "rn50.pretrained:main"))
