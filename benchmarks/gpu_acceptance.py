"""memleak's GPU acceptance run: every CUDA path on a real device, in one call.

    PYTHONPATH=. python3 benchmarks/gpu_acceptance.py OUT_DIR [--dry-run] [--parts a,b] [--budget 540]

Writes OUT_DIR/results.json (one entry per part: status, one-line summary, checks, figures)
and the fixtures under OUT_DIR/tests/data/gpu/ (copy them with ``cp -r OUT_DIR/tests .``).
Each part runs with its own time cap and, on CUDA, in a process of its own; one that fails
or hangs is recorded as such and the others still run. ``--dry-run`` runs the parts that can
run on the CPU with small sizes and marks the CUDA-only ones "skipped: no CUDA".
The parts and what each checks: docs/gpu.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.acceptance.runner import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
