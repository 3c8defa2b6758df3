"""Objects whose memory Python's sizes do not count: a PIL image keeps its pixels in memory Pillow
allocates itself (``sys.getsizeof`` of an image is a few dozen bytes, and tracemalloc does not see
its pixels). A list of images kept for a GIF or a visualisation grows the host heap by
width x height x 4 bytes a frame, held by nothing a tensor count or a plain-data size sees. The
walk counts such an image as it counts a numpy array with memory of its own.
"""

from __future__ import annotations

from typing import Any

#: Bytes a pixel takes in Pillow's own storage: one for the 8-bit single-band modes, two for the
#: 16-bit ones, four for every other mode (multi-band images are stored 4 bytes a pixel, RGB too).
_ONE_BYTE = frozenset({"1", "L", "P"})


def image_core(obj: Any) -> tuple[int, int] | None:
    """(a key for its pixel memory, its bytes) of a PIL image whose pixels are loaded, else None.
    Reads the image's own attributes only: never loads a lazily opened file."""
    d = getattr(obj, "__dict__", None)
    if not isinstance(d, dict):
        return None
    core = d.get("_im", d.get("im"))  # Pillow 11 keeps the core as `_im`, earlier ones as `im`
    if core is None or type(core).__name__ != "ImagingCore":
        return None
    width, height = core.size
    mode = core.mode
    per_pixel = 1 if mode in _ONE_BYTE else 2 if mode.startswith("I;16") else 4
    return id(core), int(width) * int(height) * per_pixel
