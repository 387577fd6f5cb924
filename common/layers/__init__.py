"""Model building blocks the models share: Keras layers whose bfloat16 gradients are right on a
CPU (bias additions, Conv2D) and batch normalisation on TensorFlow's fused kernel."""
