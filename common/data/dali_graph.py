"""Where a DALI pipeline runs and what it emits, without TensorFlow: each model's DALI graph
(``*/dali_pipeline.build_pipeline``) reads only this module, so the same graph is built by the
training run (``common/data/dali.py`` serves it to TensorFlow) and by tools on machines that have
DALI but no TensorFlow (``benchtools/dali_compare.py``, which runs it on a GPU and on the CPU).

``nvidia.dali`` is imported only when a pipeline is built.
"""
from __future__ import annotations

import dataclasses

# nvJPEG's scratch buffers, allocated once at these sizes instead of grown during the first
# epoch (the values of NVIDIA's DALI examples and DeepLearningExamples for ImageNet).
DEVICE_MEMORY_PADDING = 211_025_920
HOST_MEMORY_PADDING = 140_544_512


@dataclasses.dataclass(frozen=True)
class Placement:
    device_id: int | None  # the CUDA device (as DALI and TensorFlow count them); None: CPU
    cpu_decode: bool = False  # --dali_cpu: decode and augment on the CPU, serve on the GPU
    float16: bool = False  # images leave DALI in float16 (AMP with float16 on a GPU)

    @property
    def gpu(self) -> bool:
        return self.device_id is not None

    @property
    def decoder(self) -> dict:
        """The image decoder's device and memory hints: nvJPEG (``mixed``) on a GPU unless
        ``--dali_cpu``, the CPU otherwise."""
        if self.gpu and not self.cpu_decode:
            return {"device": "mixed", "device_memory_padding": DEVICE_MEMORY_PADDING,
                    "host_memory_padding": HOST_MEMORY_PADDING}
        return {"device": "cpu"}

    def image_dtype(self):
        from nvidia.dali import types
        return types.FLOAT16 if self.float16 else types.FLOAT

    def output(self, node):
        """A pipeline output on the device the pipeline serves from."""
        return node.gpu() if self.gpu else node


CPU = Placement(None)  # DALI's CPU-only mode, as the tests run it
