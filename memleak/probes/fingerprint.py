"""The ends of a lone tensor's values, as a short fingerprint the walk writes in the holder's row:
whether a tensor a holder keeps anew each step carries over what the last one held
(`torch.cat([kept, new])` keeps its first elements, `torch.cat([new, kept])` its last) or holds new
values only (a larger batch each step). Only the values' checksums are kept, never the tensor."""

from __future__ import annotations

import zlib
from typing import Any

import torch

#: Elements read at each end.
ENDS = 16


def ends(t: Any) -> str:
    """'head:tail', checksums of the first and last ENDS elements of a dense CPU tensor; '' for a
    tensor on a device (reading it would wait for the device), a small or non-contiguous one, or
    one that cannot say."""
    try:
        if t.device.type != "cpu" or t.layout != torch.strided or t.numel() < 2 * ENDS or not t.is_contiguous():
            return ""
        try:
            flat = t.detach().numpy().reshape(-1)  # a view of its memory: nothing copied
            head, tail = flat[:ENDS].tobytes(), flat[-ENDS:].tobytes()
        except TypeError:  # a dtype numpy lacks (bfloat16)
            values = t.detach().view(-1)
            head, tail = repr(values[:ENDS].tolist()).encode(), repr(values[-ENDS:].tolist()).encode()
    except Exception:  # a subclass, a quantized or meta tensor
        return ""
    return f"{zlib.crc32(head):08x}:{zlib.crc32(tail):08x}"
