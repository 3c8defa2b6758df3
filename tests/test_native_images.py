"""Images whose pixels live in memory of their own (PIL: probes/native.py) are counted by the walk
as numpy arrays with memory of their own are: a list of frames kept for a GIF is named, with its
bytes, though ``sys.getsizeof`` of an image is a few dozen bytes and tracemalloc never sees them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import memleak
from memleak.probes.native import image_core
from memleak.report.holder_lines import count_label
from tests.helpers import model_and_optimizer

Image = pytest.importorskip("PIL.Image")


def test_frames_kept_as_images_are_named_with_their_pixel_bytes():
    model, opt = model_and_optimizer()
    frames = []
    with memleak.track(model, optimizer=opt, level="full") as tracker:
        for _ in range(30):
            out = model(torch.randn(128, 64))
            out.pow(2).mean().backward()
            opt.step()
            heat = (out.detach().sigmoid().numpy() * 255).astype(np.uint8)
            frames.append(Image.fromarray(heat).resize((256, 256)))  # 64 KiB of pixels a frame
    top = tracker.report().suspects[0]
    assert top.location == "frames"
    assert 60 * 1024 <= top.bytes_per_step <= 70 * 1024
    assert "images" in top.evidence[0]
    assert "PIL" in top.fix
    assert count_label(tracker.run(), ["frames"]) == "tensors and images"  # the holder plot's count axis


def test_an_image_opened_lazily_is_not_loaded_by_the_walk(tmp_path):
    path = tmp_path / "frame.png"
    Image.new("RGB", (40, 30)).save(path)
    lazy = Image.open(path)
    assert image_core(lazy) is None  # no pixels yet: nothing to count, and the walk must not load them
    model, opt = model_and_optimizer()
    with memleak.track(model, optimizer=opt, level="full"):
        for _ in range(3):
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
    assert lazy.__dict__.get("_im", lazy.__dict__.get("im")) is None
    lazy.load()
    assert image_core(lazy)[1] == 40 * 30 * 4
    assert image_core(Image.new("L", (40, 30)))[1] == 40 * 30
    assert image_core(Image.new("I;16", (40, 30)))[1] == 40 * 30 * 2
