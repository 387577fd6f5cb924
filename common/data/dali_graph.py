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
# The share of the JPEGs nvJPEG hands to the GPU's hardware JPEG engines (A100, H100, H200; a
# GPU without them decodes everything on its CUDA cores and ignores it). DALI's default is
# 0.65; on an H200 the ResNet-50 training pipeline feeding a PyTorch AMP step kept 88.4% of
# the step's synthetic speed at 0.65, 90.7% at 0.9 and 92.6% at 0.99, where DALI also held
# 412 MiB of GPU memory instead of 3,692 (docs/performance/gpu.md): on Hopper the engines
# should take nearly all of the decoding. ``--dali_hw_decoder_load`` sets it.
HW_DECODER_LOAD = 0.99


@dataclasses.dataclass(frozen=True)
class Placement:
    device_id: int | None  # the CUDA device (as DALI and TensorFlow count them); None: CPU
    cpu_decode: bool = False  # --dali_cpu: decode and augment on the CPU, serve on the GPU
    float16: bool = False  # images leave DALI in float16 (AMP with float16 on a GPU)
    hw_decoder_load: float = HW_DECODER_LOAD  # nvJPEG's share for the JPEG engines

    @property
    def gpu(self) -> bool:
        return self.device_id is not None

    @property
    def decoder(self) -> dict:
        """The image decoder's device and hints: nvJPEG (``mixed``) on a GPU unless
        ``--dali_cpu``, with its memory padding and the hardware decoders' share; the CPU
        otherwise."""
        if self.gpu and not self.cpu_decode:
            return {"device": "mixed", "device_memory_padding": DEVICE_MEMORY_PADDING,
                    "host_memory_padding": HOST_MEMORY_PADDING,
                    "hw_decoder_load": self.hw_decoder_load}
        return {"device": "cpu"}

    def image_dtype(self):
        from nvidia.dali import types
        return types.FLOAT16 if self.float16 else types.FLOAT

    def output(self, node):
        """A pipeline output on the device the pipeline serves from."""
        return node.gpu() if self.gpu else node


CPU = Placement(None)  # DALI's CPU-only mode, as the tests run it
