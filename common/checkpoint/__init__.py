"""What a checkpoint is, in one place:

* ``store``: checkpoints that are never lost, never silently ignored and never half-written
  (saving, restoring newest-first, weights-only ones, loading weights into another model).
* ``settings``: what a checkpoint records beside it (``settings.json``): the model's
  description of itself (``Task.checkpoint``, a ``CheckpointSpec``), the one function that
  gives a checkpoint's settings to both the record and an export's ``client.json``, and what a
  run takes from the checkpoint it starts from.
* ``start``: what a training run starts from besides its own checkpoints: the record and
  class names written beside each save, the data-derived facts checked, and the weights of a
  fine-tuning run (``--finetune_checkpoint``).
"""
