"""How long memleak takes to load and analyse a large PyTorch memory snapshot.

Builds a synthetic snapshot shaped like a real one recorded with
``_record_memory_history(max_entries=100_000)``: 100k trace entries, 2,000
segments holding 20k blocks, 300 distinct stacks of 20-40 frames (Python and
C++) shared between entries the way torch shares them. Pickles it, then times
``memleak.load`` + ``fragmentation()`` + the snapshot findings (``memleak.analyze``) + the text report.

    python3 benchmarks/snapshot_load.py [--entries N]
"""
from __future__ import annotations

import argparse
import pickle
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memleak  # noqa: E402

MiB = 1 << 20
ACTIONS = ("alloc", "free_requested", "free_completed")


def make_stacks(rng: random.Random, n_stacks: int = 300) -> list[list[dict]]:
    cpp = [{"filename": f"/pytorch/aten/src/ATen/native/op{i}.cpp", "line": rng.randint(1, 3000),
            "name": f"at::native::op{i}"} for i in range(200)]
    lib = [{"filename": f"/usr/lib/python3.11/site-packages/torch/nn/modules/m{i}.py", "line": rng.randint(1, 900),
            "name": "forward"} for i in range(60)]
    user = [{"filename": f"/home/u/project/model{i % 7}.py", "line": rng.randint(1, 400), "name": f"block{i}"}
            for i in range(120)]
    return [rng.sample(cpp, rng.randint(12, 25)) + rng.sample(lib, rng.randint(2, 8)) + rng.sample(user, 4)
            for _ in range(n_stacks)]


def make_snapshot(n_entries: int, seed: int = 0, n_segments: int = 2000) -> dict:
    rng = random.Random(seed)
    stacks = make_stacks(rng)
    segments, base = [], 0x7F0000000000
    for s in range(n_segments):
        blocks, addr = [], base + s * 1024 * MiB
        for _ in range(10):
            size = rng.choice((2, 4, 8, 20)) * MiB
            if rng.random() < 0.6:
                blocks.append({"address": addr, "size": size, "requested_size": size - rng.randrange(0, 512 * 1024),
                               "state": "active_allocated", "frames": rng.choice(stacks)})
            else:
                blocks.append({"address": addr, "size": size, "requested_size": 0, "state": "inactive",
                               "frames": []})
            addr += size
        total = addr - (base + s * 1024 * MiB)
        segments.append({"device": 0, "address": base + s * 1024 * MiB, "total_size": total, "stream": 0,
                         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                         "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                         "active_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                         "requested_size": sum(b["requested_size"] for b in blocks), "frames": [],
                         "blocks": blocks})
    trace = [{"action": ACTIONS[i % 3], "addr": base + rng.randrange(0, 1 << 40, 512),
              "size": rng.choice((2, 4, 8)) * MiB, "stream": 0, "time_us": 1_700_000_000_000_000 + i,
              "frames": rng.choice(stacks)}
             for i in range(n_entries - 1)]
    trace.append({"action": "oom", "device_free": 10 * MiB, "size": 64 * MiB, "stream": 0,
                  "time_us": 1_700_000_000_000_000 + n_entries, "frames": rng.choice(stacks)})
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.pickle"
        path.write_bytes(pickle.dumps(make_snapshot(args.entries)))
        size = path.stat().st_size
        t0 = time.perf_counter()
        snap = memleak.load(path)
        t1 = time.perf_counter()
        frag = snap.fragmentation()
        report = memleak.analyze(snap)
        findings = report.findings
        str(report)
        t2 = time.perf_counter()
    print(f"{len(snap.trace)} trace entries, {len(snap.blocks)} blocks in {len(snap.segments)} segments "
          f"({size / MiB:.0f} MiB pickle)")
    print(f"load {t1 - t0:.2f} s, fragmentation + findings + report {t2 - t1:.2f} s, "
          f"total {t2 - t0:.2f} s ({len(frag)} pool rows, {len(findings)} findings)")

if __name__ == "__main__":
    main()
