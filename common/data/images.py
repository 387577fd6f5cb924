"""Images as both image models read them: ImageNet's channel statistics, decoding (what DALI
decodes too), normalisation, a file for predict mode, and the JPEG bytes the ``prepare_dataset``
scripts write."""
from __future__ import annotations

import io

import numpy as np
import tensorflow as tf
from PIL import Image

from common.data.imagenet_stats import MEAN, STD
from common.errors import DataError


def image_input_info(size: int) -> dict:
    """The ``client.json`` fields the image models share in their exports: the network's
    input, RGB in NHWC on the 0..255 scale, less ImageNet's mean and over its standard
    deviation."""
    return {"input_size": [size, size], "channels": "RGB", "layout": "NHWC",
            "mean": list(MEAN), "std": list(STD), "scale": "0..255"}


def decode(encoded):
    """Any image format that DALI also decodes (JPEG, PNG, BMP, GIF's first frame), as RGB."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def decode_exact(encoded):
    """``decode``, JPEGs with the accurate integer DCT that libjpeg (PIL, and so torchvision,
    timm and keras.utils.load_img) uses by default: TensorFlow's default, the fast one, differs
    from it by about a level a pixel (up to 18 here)."""
    def jpeg():
        return tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE")
    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, lambda: decode(encoded))
    image.set_shape([None, None, 3])
    return image


def normalize(image):
    """(H, W, 3) float32: each channel less its ImageNet mean, over its standard deviation."""
    return (tf.cast(image, tf.float32) - MEAN) / STD


def read_image(path: str):
    """The image file at ``path``, decoded (predict mode); one line when it is not an image."""
    try:
        return tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    except tf.errors.InvalidArgumentError:
        raise DataError(f"{path} is not an image TensorFlow can decode") from None


def jpeg_bytes(path: str) -> bytes:
    """The image as JPEG bytes, after decoding it in full: a file that TensorFlow's decoder (what
    training uses) cannot read, such as a truncated JPEG with a valid header, stops here with its
    name. JPEGs are kept as they are. Other formats are decoded as training and predict decode
    them (TensorFlow: PNG, BMP, GIF's first frame; 16-bit PNGs scaled to 8 bits, value / 257)
    and re-encoded as RGB JPEG; what TensorFlow cannot decode (CMYK JPEG, TIFF) goes through
    PIL, with 16-bit grey scaled the same way."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:3] == b"\xff\xd8\xff":
        try:
            tf.io.decode_jpeg(data, channels=3)
            return data
        except tf.errors.OpError:
            pass  # PIL below re-encodes what it can read in full (CMYK, odd markers)
    elif _tf_decodes(data):
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
        return tf.io.encode_jpeg(image, quality=95).numpy()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()  # decodes every pixel: a truncated file raises here
        if image.mode.startswith("I"):  # 16- or 32-bit grey: PIL's convert would clip to white
            grey = np.asarray(image, dtype=np.float64)
            image = Image.fromarray(np.clip(np.round(grey / 257), 0, 255).astype(np.uint8))
        image = image.convert("RGB")
    except Exception as e:  # PIL raises many types for bad files
        raise DataError(f"{path} is not a readable image ({e})") from None
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95)
    return out.getvalue()


def _tf_decodes(data: bytes) -> bool:
    """Whether TensorFlow's decode_image reads ``data`` in full (a PNG, BMP or GIF)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" and data[:2] != b"BM" and data[:4] != b"GIF8":
        return False
    try:
        tf.io.decode_image(data, channels=3, expand_animations=False)
        return True
    except tf.errors.OpError:
        return False
