"""Draws detections on an image (predict mode writes one PNG per input image)."""
from __future__ import annotations

import numpy as np

_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
            (145, 30, 180), (70, 240, 240), (240, 50, 230)]


def draw_detections(image: np.ndarray, record: dict, path: str) -> None:
    """``path``: a PNG of ``image`` with its detections, written whole or not at all (a full
    disk leaves no empty drawing behind: ``files.write_atomically``)."""
    import io

    from PIL import Image, ImageDraw

    from common.files import write_atomically

    im = Image.fromarray(image.astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for box, cls, name, score in zip(record["boxes_ymin_xmin_ymax_xmax"], record["classes"],
                                     record["names"], record["scores"]):
        y0, x0, y1, x1 = box
        colour = _COLOURS[cls % len(_COLOURS)]
        draw.rectangle([x0, y0, x1, y1], outline=colour, width=2)
        draw.text((x0 + 2, y0 + 1), f"{name} {score:.2f}", fill=colour)
    out = io.BytesIO()
    im.save(out, format="PNG")
    write_atomically(path, out.getvalue())
