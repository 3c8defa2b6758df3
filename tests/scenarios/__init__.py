"""The scenario corpus: leaky and benign training/inference loops with known culprits.

Each module defines ``EXPECTED = {"verdict", "kind", "location", "top"}`` and
``run(tracker_factory, steps)``, which builds a small CPU model and runs its loop inside
``tracker_factory(model, optimizer=...)`` (a context manager: ``memleak.track`` with options).
``location`` must appear in the location of one of the first ``top`` suspects.
"""
from __future__ import annotations

import importlib
import pkgutil
import re


def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name: str):
    return importlib.import_module(f"{__name__}.{name}")


_FILE_LINE = re.compile(r"\S+\.py:\d+")


def names_location(expected: str, location: str) -> bool:
    """Whether a suspect's `location` names the `expected` holder. A location that is a file and a
    line (what made tensors no name holds) names it only where `expected` is one: a scenario's file
    name often contains its holder's name (leak_atexit_save.py:42 is not 'atexit')."""
    if ".py" not in expected:
        location = _FILE_LINE.sub("", location)
    return expected in location
