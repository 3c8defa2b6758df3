"""`decide`: linear growth that no suspect is sure enough of is never called clean."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from memleak.analysis import LEAK_CONFIDENCE, decide
from memleak.schema import Shape, Verdict


def _growth(shape: Shape, leak: bool) -> SimpleNamespace:
    return SimpleNamespace(shape=shape, leak=leak)


@pytest.mark.parametrize("leak", [True, False])
def test_linear_growth_with_no_confident_suspect_is_inconclusive(leak):
    unsure = SimpleNamespace(leak=True, confidence=LEAK_CONFIDENCE - 0.1)
    assert decide(_growth(Shape.LINEAR, leak), [unsure]) == Verdict.INCONCLUSIVE
    assert decide(_growth(Shape.LINEAR, leak), []) == Verdict.INCONCLUSIVE


def test_a_confident_suspect_is_a_leak_and_flat_memory_is_clean():
    sure = SimpleNamespace(leak=True, confidence=LEAK_CONFIDENCE)
    assert decide(_growth(Shape.LINEAR, True), [sure]) == Verdict.LEAK
    assert decide(_growth(Shape.FLAT, False), []) == Verdict.CLEAN
    assert decide(_growth(Shape.PLATEAU, False), [SimpleNamespace(leak=False, confidence=0.9)]) == Verdict.CLEAN
