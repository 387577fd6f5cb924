"""SSD320 v1.2: the model package (its ``main.py`` beside it)."""
import tf_model_scripts  # noqa: F401  (first: its names are this distribution's)
