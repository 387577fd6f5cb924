"""ImageNet's channel statistics, each convention's written once. No TensorFlow: the DALI graphs
read them too.

* NVIDIA's scripts' (ResNet-50, and the SSD320 trunk, which starts from its weights), on the
  0..255 scale: ``MEAN``, ``STD``.
* torchvision's (timm's default, keras-hub's ResNet presets'), on the 0..1 scale as they write
  them: ``UNIT_MEAN``, ``UNIT_STD``; on the 0..255 scale: ``TORCH_MEAN``, and ``STD`` (x 255,
  the same three numbers as NVIDIA's).
"""
MEAN = (123.68, 116.78, 103.94)
STD = (58.395, 57.12, 57.375)
UNIT_MEAN = (0.485, 0.456, 0.406)
UNIT_STD = (0.229, 0.224, 0.225)
TORCH_MEAN = (123.675, 116.28, 103.53)  # UNIT_MEAN x 255, as written (the product rounds off)
