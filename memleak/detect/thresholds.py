"""The smallest growth the detectors call a leak, apart from the detectors (no scipy, no pandas),
so the recorder's live screen can skip series that cannot reach it without importing them."""

from __future__ import annotations

#: The rise must be this share of the series' level besides clearing the noise (growth_stats);
#: RSS creeps benignly, so it needs more.
MIN_REL_GROWTH = 0.001
MIN_REL_GROWTH_HOST = 0.02


def min_rel_growth(column: str | None) -> float:
    """The share of its level a rise of `column` must reach to count as growth."""
    return MIN_REL_GROWTH_HOST if column == "rss_bytes" else MIN_REL_GROWTH
