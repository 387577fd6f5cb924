"""Serving an export: the clients that query a Triton server (``image_client``,
``text_client``), the launchers of a server on a CPU host (``tritonserver``: PyTriton's
binary on an ``--export_triton`` repository; ``pytriton_server``: an export's SavedModel through
PyTriton), the load generator of the serving figures (``load``) and perf_analyzer's launcher
(``triton_perf.sh``), each run as ``python -m serving.<name>`` from the checkout.

They run where tritonclient or PyTriton is installed and this project's training code is not
(Triton's SDK container, the environment ``scripts/triton_env.sh`` makes: tritonclient's
protobuf and PyTriton's numpy clash with TensorFlow's), so nothing here imports ``common``,
``benchtools`` or the models (tests/test_layout.py); what they share is
``serving.connection``. The Triton repositories themselves are written by the export,
``common.export``.
"""
