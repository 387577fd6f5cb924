"""Data every model's pipelines share: TFRecord shards, their index files and writing them, one
rank's share of the records, DALI's graph and how it is served to TensorFlow, images (decoding,
ImageNet's statistics), input failures as one line, and ``prepare_dataset.py``'s command line.
Importing the package imports nothing: ``dali_graph`` and ``imagenet_stats`` run without
TensorFlow."""
