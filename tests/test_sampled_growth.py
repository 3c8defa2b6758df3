"""Growth on sampled deep steps needs corroboration: a holder that keeps as many tensors as before
leaks only if their size keeps setting new highs, and a growth that ends in a long flat stretch
filled (a cache at its capacity), it does not leak. Pure detector tests on synthetic records."""

from __future__ import annotations

from memleak.detect.holder_growth import buffer_findings, holder_findings
from memleak.detect.sampled_trend import decelerated, keeps_new_highs, plateaued, refills_level, sustained_rise
from memleak.records import HolderRow, HoldersRecord

KIB = 1024


def _records(steps, counts, nbytes, holder="cache", buffers=None):
    return [
        HoldersRecord(
            step=s,
            holders=(HolderRow(holder=holder, kind="local", count=c, bytes=b),),
            buffers={"rope.cos": [b // 4, b]} if buffers else {},
        )
        for s, c, b in zip(steps, counts, nbytes, strict=True)
    ]


def _leaks(records) -> set[str]:
    found: dict = {}
    holder_findings(records, {}, None, found, set())
    buffer_findings(records, found)
    return {loc for loc, f in found.items() if f["leak"]}


def test_a_cache_that_filled_and_stayed_full_is_no_leak():
    # an LRU cache of 11 entries sampled at full level: it fills over 18 steps, then stays full for 8
    steps = [1, 7, 9, 11, 14, 18, 20, 26]
    filled = [1, 6, 6, 7, 10, 11, 11, 11]
    assert plateaued(steps, filled, 2)
    assert sustained_rise(steps, filled, 2) is None
    assert _leaks(_records(steps, filled, [c * 4 * KIB for c in filled])) == set()
    # the same start that goes on growing is a leak
    growing = [1, 6, 6, 7, 10, 11, 13, 16]
    assert sustained_rise(steps, growing, 2) is not None
    assert _leaks(_records(steps, growing, [c * 4 * KIB for c in growing])) == {"cache"}


def test_a_cache_of_a_finite_set_of_keys_that_all_but_stopped_filling_is_no_leak():
    # token ids seen so far (200 of them, 16 drawn a step), sampled as level auto does: densely while
    # the run is young, then at a check; the last few ids trickle in, so it never ends flat
    steps = [*range(1, 32, 2), 45, 47, 49, 51, 53, 63]
    seen = [round(200 * (1 - (1 - 1 / 200) ** (16 * s))) for s in steps]
    assert seen[-1] > seen[-2] and not plateaued(steps, seen, 2)
    assert decelerated(steps, seen, 2) and sustained_rise(steps, seen, 2) is None
    assert _leaks(_records(steps, seen, [c * 32 * KIB for c in seen])) == set()
    # a steady leak sampled the same way keeps its rate; so does a staircase (one tensor every 10 steps)
    assert sustained_rise(steps, [3 * s for s in steps], 2) is not None
    assert not decelerated(steps, [s // 10 for s in steps], 2)
    # a cache that slows down but still gains a third of its earlier rate is not judged full yet
    assert not decelerated(steps, [min(s, 31) + (s - 31) // 3 if s > 31 else s for s in steps], 2)


def test_a_slow_leak_sampled_between_its_rises_is_still_a_leak():
    # one tensor every 4 steps, sampled every 3: two flat intervals at the end are expected at that rate
    steps = [0, 3, 6, 9, 12, 15, 18, 21, 23, 24]
    flat_tail = [0, 0, 1, 2, 3, 3, 4, 5, 5, 5]
    assert not plateaued(steps, flat_tail, 2)  # at 0.25 a step it would gain 0.25 * 6 < 2 * 2 tensors
    assert sustained_rise(steps, flat_tail, 2) is not None


def test_one_tensor_whose_size_merely_varies_is_no_leak():
    # one tensor a step of a random sequence length: four of five sampled intervals happen to rise,
    # but the sizes stay within the range already seen (the 40 KiB of the second sample)
    steps = [2, 6, 9, 14, 18, 23]
    sizes = [8 * KIB, 40 * KIB, 12 * KIB, 20 * KIB, 30 * KIB, 38 * KIB]
    assert sustained_rise(steps, sizes, KIB, rel_rise=0.5) is not None  # what alone used to make a leak
    assert not keeps_new_highs(steps, sizes)
    assert _leaks(_records(steps, [1] * 6, sizes)) == set()
    assert _leaks(_records(steps, [1] * 6, sizes, buffers=True)) == set()


def test_one_tensor_that_grows_every_step_is_a_leak():
    # a buffer concatenated to every step: a new high on every sample
    steps = [2, 6, 9, 14, 18, 23]
    sizes = [s * 2 * KIB for s in steps]
    assert keeps_new_highs(steps, sizes)
    assert _leaks(_records(steps, [1] * 6, sizes)) == {"cache"}
    assert "rope.cos" in _leaks(_records(steps, [1] * 6, sizes, buffers=True))


def test_a_long_significant_trend_counts_even_with_dips():
    # twelve samples that rise with two dips: not a new high each time, but a trend no chance makes
    steps = list(range(0, 36, 3))
    sizes = [10, 14, 13, 18, 22, 21, 26, 30, 33, 37, 40, 44]
    assert keeps_new_highs(steps, [s * KIB for s in sizes])
    # the same values in a random order are no trend
    assert not keeps_new_highs(steps, [s * KIB for s in [22, 10, 37, 14, 30, 13, 44, 18, 21, 26, 33, 40]])


def test_a_table_that_grows_to_the_longest_length_seen_is_no_leak():
    # a rotary cos/sin table recomputed only for a longer sequence: a running maximum that stops
    steps = [1, 4, 8, 11, 15, 19, 22, 26, 29]
    sizes = [k * KIB for k in [40, 70, 70, 88, 93, 93, 93, 93, 93]]
    assert not keeps_new_highs(steps, sizes)
    assert _leaks(_records(steps, [1] * 9, sizes, buffers=True)) == set()


def _survivors_leak(counts) -> bool:
    """Whether old tensors of `cache` that survive to the last walk make a leak, given its counts."""
    from memleak.detect.survivors import birth_findings
    from memleak.records import BirthCohort, BirthsRecord

    steps = [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]
    holders = _records(steps, counts, [c * 4 * KIB for c in counts])
    # the entries stored on most sampled steps are still in the cache at step 28 (hits kept them)
    alive = tuple(
        BirthCohort(born=s, site="train.py:9", holder="cache", count=1, bytes=4 * KIB)
        for s in (4, 7, 10, 13, 16, 19, 22)
    )
    births = [BirthsRecord(step=s, cohorts=tuple(c for c in alive if c.born <= s - 2)) for s in steps]
    found: dict = {}
    birth_findings(births, holders, {"cache": "local"}, found)
    return any(f["leak"] for f in found.values())


def test_old_entries_of_a_full_cache_are_no_accumulation():
    # an LRU cache that filled by step 13 and stayed full: some old entries survive, its size does not grow
    assert not _survivors_leak([1, 3, 5, 8, 10, 10, 10, 10, 10, 10])
    # the same survivors in a container that keeps growing accumulate
    assert _survivors_leak([1, 3, 5, 8, 10, 12, 14, 16, 18, 20])


def test_more_aliases_of_storage_already_held_are_no_leak():
    # model.state_dict() appended every other step: six more tensors each time, all sharing the
    # parameters' storages, so the holder's bytes never move
    steps = [1, 5, 9, 13, 17, 21, 25, 29]
    counts = [6 * (s // 2 + 1) for s in steps]
    assert sustained_rise(steps, counts, 2) is not None
    assert _leaks(_records(steps, counts, [175 * KIB] * 8)) == set()
    # the same count with a little more memory each time (detached scalars) stays a leak
    assert _leaks(_records(steps, counts, [175 * KIB + 4 * c for c in counts])) == {"cache"}


# a metric's list state sampled at full level over 200 steps: appended every step, reset every 25
_EPOCH_STEPS = [1, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 28, 30, 36, 40, 46, 52, 54, 56, 61, 63, 65, 71, 77, 79, 81,
                83, 85, 87, 89, 94, 96, 98, 104, 106, 112, 115, 117, 123, 129, 135, 141, 144, 147, 151, 153, 159,
                161, 167, 173, 179, 185, 191, 196]  # fmt: skip


def _epoch_counts(kept_per_epoch: int = 0) -> list[float]:
    return [(s % 25) + 1 + kept_per_epoch * (s // 25) for s in _EPOCH_STEPS]


def test_a_state_filled_each_epoch_and_reset_at_its_end_is_no_leak():
    counts = _epoch_counts()
    assert refills_level(counts, 2)
    assert sustained_rise(_EPOCH_STEPS, counts, 2) is None
    assert _leaks(_records(_EPOCH_STEPS, counts, [int(c) * 4 * KIB for c in counts])) == set()


def test_a_sawtooth_whose_lows_rise_is_still_judged_as_growth():
    # something kept from every epoch (3 tensors) under the cycle: the lows rise
    assert not refills_level(_epoch_counts(kept_per_epoch=3), 2)
    # and a plain steady leak has no cycle at all
    assert not refills_level(list(range(1, 40)), 2)


def test_a_staircase_that_never_falls_grows_although_most_samples_are_flat():
    """The loss kept with its graph every 5 steps, sampled every other step: a rise on a third of
    the samples, flat between. It never falls and rises all along the run: growth."""
    steps = list(range(1, 60, 2))
    counts = [s // 5 + 1 for s in steps]
    assert sum(b > a for a, b in zip(counts, counts[1:])) < 0.5 * (len(counts) - 1)  # mostly flat
    assert sustained_rise(steps, counts, 2) is not None
    # ...and the same every 10 steps, sampled on an irregular schedule
    steps = [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 39, 41, 43, 45, 51, 53, 56, 58, 60, 66, 68]
    assert sustained_rise(steps, [s // 10 + 1 for s in steps], 2) is not None
    assert _leaks(_records(steps, [s // 10 + 1 for s in steps], [4 * (s // 10 + 1) * KIB for s in steps])) == {"cache"}


def test_a_staircase_that_fills_early_or_falls_back_is_no_growth():
    steps = list(range(1, 80, 2))
    filled = [min(s // 5 + 1, 6) for s in steps]  # a bounded window, full at step 25: flat since
    assert sustained_rise(steps, filled, 2) is None
    reset = [(s % 40) // 5 + 1 for s in steps]  # emptied every 40 steps (an epoch's list)
    assert sustained_rise(steps, reset, 2) is None
    dipped = [s // 5 + 1 - 3 * (s >= 41) for s in steps]  # a staircase with a fall back: not one
    assert sustained_rise(steps, dipped, 2) is None
    sparse = [1] * 30 + [2, 2, 2, 3, 3, 3, 3, 3, 3, 3]  # two late rises only
    assert sustained_rise(steps, sparse, 2) is None


def test_a_flat_stretch_shorter_than_two_treads_is_the_next_tread_not_a_plateau():
    """Bytes gained 256 KiB every 10 steps, three times: the last 8 steps without a rise are a
    tread (the rate-based rule alone reads them as a full cache); 70 flat steps are a plateau."""
    steps = list(range(1, 40, 2))
    nbytes = [256 * KIB * (s // 10 + 1) for s in steps]
    assert not plateaued(steps, nbytes, 1024)
    steps_long = steps + list(range(41, 110, 2))
    flat = nbytes + [nbytes[-1]] * (len(steps_long) - len(steps))
    assert plateaued(steps_long, flat, 1024)


def test_a_holder_that_starts_filling_late_is_given_its_rate_since_then():
    """Empty at the young walks and the early checks, then 32 KiB a step from step 260: its rate is
    the rise since it began, not diluted over the flat samples before (which made a second cause
    look needed for the memory's growth)."""
    steps = [1, 3, 7, 15, 31, 63, 127, 255, 300, 320, 340, 360]
    held = [0, 0, 0, 0, 0, 0, 0, 0, 40 * 32, 60 * 32, 80 * 32, 100 * 32]
    assert sustained_rise(steps, held, 2)["slope"] == 32.0
    steady = [3 * s for s in steps]  # a holder rising from the start keeps its rate over every sample
    assert sustained_rise(steps, steady, 2)["slope"] == 3.0



def test_a_holder_that_starts_filling_halfway_is_judged_on_its_samples_since_then():
    """A loss history turned on halfway through a 30-step run: empty on the first walks, then one
    more each step. Its few samples since it began are mostly rises; over all samples they are not."""
    steps = [1, 3, 7, 11, 23, 29]
    held = [0, 0, 0, 0, 8, 14]
    trend = sustained_rise(steps, held, 2)
    assert trend is not None and trend["n"] == 3  # judged on the last empty walk and the two since
    assert 0.5 < trend["confidence"] < 0.95  # three samples: less sure than a long rise
    assert sustained_rise(steps[:-1], held[:-1], 2) is None  # one rise after the flat start is no trend

def _evidence(records, holder="cache") -> str:
    found: dict = {}
    holder_findings(records, {}, None, found, set())
    return " ".join(found[holder]["evidence"])


def test_the_old_items_of_a_growing_holder_are_a_lower_bound_unless_all_are_old():
    # an item's age counts from the walk that first saw it: items added between sparse walks look new
    steps = list(range(1, 41, 3))
    rows = [
        HoldersRecord(step=s, holders=(HolderRow(holder="cache", kind="local", count=s, bytes=s * KIB, old=old),))
        for s, old in zip(steps, [0, *[s // 2 for s in steps[1:]]], strict=True)
    ]
    assert "at least 20 of them are two or more steps old" in _evidence(rows)
    rows[-1] = HoldersRecord(step=40, holders=(HolderRow(holder="cache", kind="local", count=40, bytes=40 * KIB, old=40),))
    assert "all 40 of them are two or more steps old" in _evidence(rows)


def test_a_sawtooth_that_stops_being_emptied_is_judged_from_its_last_fall():
    """A buffer filled and emptied each update, until the emptying stops (a frozen policy still
    collecting, ml-agents #1817): the growth since its last fall is judged on its own."""
    from memleak.detect.sampled_trend import late_rise

    steps = list(range(0, 60, 3))
    count = [2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 4, 6, 8, 11, 17, 20, 23, 26, 29]
    assert sustained_rise(steps, count, 1) is None  # the whole series falls too often
    k = late_rise(steps, count)
    assert k == 9 and sustained_rise(steps[k:], count[k:], 1) is not None


def test_an_epoch_still_filling_at_the_run_s_end_is_no_late_rise():
    """Outputs kept over each epoch of 8 samples, cleared at its end: the run ends mid-epoch, its last
    fill no longer nor higher than the ones before."""
    from memleak.detect.sampled_trend import late_rise

    count = [1, 2, 3, 4, 5, 6, 7, 8] * 2 + [1, 2, 3, 4, 5, 6]
    assert late_rise(list(range(len(count))), count) == 0
    rising_past = [1, 2, 3, 4, 5, 6, 7, 8] * 2 + list(range(1, 21))  # then never cleared again
    assert late_rise(list(range(len(rising_past))), rising_past) == 16
