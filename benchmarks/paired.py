"""Paired whole-loop timing shared by the stack benchmarks: every (loop, level) pair, untracked
(level None) included, runs once per round in a shuffled order, and each ratio is the median over
rounds of tracked / untracked time taken in the same round."""
from __future__ import annotations

import random
import statistics
from collections.abc import Callable

# name -> block(level, steps) -> (wall seconds, CPU seconds) of one whole loop
Blocks = dict[str, Callable[[str | None, int], tuple[float, float]]]


def measure(blocks: Blocks, levels, rounds: int, steps: int, warmup: int = 3):
    """Ratios {(name, level): (wall, CPU)} and the wall times {(name, level): [seconds per round]}."""
    for block in blocks.values():  # warm up: compiles, first-use imports and caches
        for level in (None, *levels):
            block(level, warmup)
    wall: dict = {}
    cpu: dict = {}
    for _ in range(rounds):
        order = [(n, lv) for n in blocks for lv in (None, *levels)]
        random.shuffle(order)
        for name, level in order:
            w, c = blocks[name](level, steps)
            wall.setdefault((name, level), []).append(w)
            cpu.setdefault((name, level), []).append(c)

    def ratio(times, name, level):
        return statistics.median(t / b for t, b in zip(times[(name, level)], times[(name, None)]))

    return {(n, lv): (ratio(wall, n, lv), ratio(cpu, n, lv)) for n in blocks for lv in levels}, wall
