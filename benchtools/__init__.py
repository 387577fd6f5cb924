"""Tools that measure the models from above: each runs ``main.py`` (or a model's pipeline) as a
user would and reads its logs; nothing in ``common/`` or a model package imports them.

- ``sweep``: a benchmark mode over batch sizes and precisions, one table (``benchmark.sh``);
  ``ab``: one command line at two git revisions, side by side;
- ``report``: charts and a Markdown page from runs' logs; ``profile_diff``: two ``--profile``
  runs op type by op type; ``amp_lists``: an AMP run's ops against the AMP graph rewrite's
  lists; ``onednn``: where a CPU step's kernel time goes inside oneDNN;
- ``peers``: each model against the Keras model a user would pick instead;
  ``int8_accuracy``: INT8 ONNX against float32 ONNX, accuracy and latency;
- GPU checks (``scripts/gpu_smoke.sh``): ``parity`` (GPU against CPU, step for step),
  ``dali_compare`` (a DALI pipeline on the GPU against the CPU), ``allreduce`` (Horovod's
  allreduce by message size), ``smoke`` (the stages' table).
"""
import tf_model_scripts  # noqa: F401, I001  (first: its names are this distribution's)
from common.entry import own_checkout_first

# ``python -m benchtools.X`` in a checkout: its models, not an installed copy's (main.py's rule).
own_checkout_first()


def failure(proc) -> str:
    """Why a finished ``subprocess.run(..., stderr=PIPE, text=True)`` failed, in one line: the
    last non-empty line of its stderr (where main.py prints its one-line error), else its exit
    code."""
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"
