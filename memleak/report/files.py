"""Which files report.save may write over: its own earlier reports, never a file of the user's
that happens to have the same name (a report.txt of their own, a memory.png from another tool)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError

# What each file memleak writes carries near its start, and where.
PNG_METADATA = {"Software": "memleak"}
_MARKS = {
    ".txt": (b"memleak report:",),
    ".html": (b"<title>memleak report:",),
    ".json": (b'"generator": "memleak"', b'{\n  "verdict": "'),  # the second: reports before the mark
    ".png": (b"Software\x00memleak",),
}
_HEAD = 4096  # every mark lies in the first bytes; PNG text chunks come before the image data


def written_by_memleak(path: Path) -> bool:
    """Whether the file at `path` is one that report.save wrote."""
    marks = _MARKS.get(path.suffix, ())
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
        return any(mark in head for mark in marks)
    except OSError:
        return False


def check_free(paths: list[Path]) -> None:
    """Refuse, before anything is written, when one of `paths` is a file memleak did not write."""
    for path in paths:
        if path.is_dir() or (path.exists() and not written_by_memleak(path)):
            raise UsageError(
                f"{path}: exists and was not written by memleak; report.save never writes over it: "
                "save into another folder, or move the file"
            )
