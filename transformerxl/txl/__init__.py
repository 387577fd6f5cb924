"""Transformer-XL base: the model package (its ``main.py`` beside it)."""
import tf_model_scripts  # noqa: F401  (first: its names are this distribution's)
