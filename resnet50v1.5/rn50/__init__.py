"""ResNet-50 v1.5: the model package (its ``main.py`` beside it)."""
import tf_model_scripts  # noqa: F401  (first: its names are this distribution's)
