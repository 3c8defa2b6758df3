"""The scenario corpus: leaky and benign training/inference loops with known culprits.

Each module defines ``EXPECTED = {"verdict", "kind", "location", "top"}`` and
``run(tracker_factory, steps)``, which builds a small CPU model and runs its loop inside
``tracker_factory(model, optimizer=...)`` (a context manager: ``memleak.track`` with options).
``location`` must appear in the location of one of the first ``top`` suspects.
"""
from __future__ import annotations

import importlib
import pkgutil



def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name: str):
    return importlib.import_module(f"{__name__}.{name}")
