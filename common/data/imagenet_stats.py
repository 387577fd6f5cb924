"""ImageNet's channel statistics on the 0..255 scale, as in NVIDIA's scripts (ResNet-50 and the
SSD320 trunk, which starts from its weights). No TensorFlow: the DALI graphs read them too."""
MEAN = (123.68, 116.78, 103.94)
STD = (58.395, 57.12, 57.375)
