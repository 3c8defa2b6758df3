"""Part "fixtures": the fixtures this run wrote, read back by the same checks the CPU tests
run on them (tests/gpu_fixture_checks.py), and their size (under 5 MiB together)."""

from __future__ import annotations

from typing import Any

from .harness import FIXTURES, Checks, Context, skipped


def run(ctx: Context) -> dict[str, Any]:
    from tests import gpu_fixture_checks as fc

    root = ctx.out / FIXTURES
    if not any((root / name).is_dir() for name in fc.CHECKS):
        why = "no CUDA: the fixtures are recorded on a GPU only" if not ctx.cuda else "no fixture was written"
        return skipped(why)
    checks = Checks()
    for name, check in fc.CHECKS.items():
        folder = root / name
        if not folder.is_dir():
            checks.check(f"{name}: recorded", False, why="its part did not write it (see that part)")
            continue
        try:
            check(folder)
            checks.check(f"{name}: reads as it must", True)
        except Exception as e:  # an AssertionError from the check, or a load that failed
            checks.check(f"{name}: reads as it must", False, error=f"{type(e).__name__}: {e}"[:600])
    total = fc.total_bytes(root)
    checks.check("under 5 MiB together", total <= fc.MAX_TOTAL_BYTES, bytes=total)
    files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
    return checks.result(f"{len(files)} files, {total / (1 << 20):.2f} MiB", files=files)
