"""When a growing holder was emptied or replaced between two reference walks (its tensors all
new), and the one case where that is still a leak: a holder filled anew every step, with more
tensors each time, by something that runs once more each step (a hook registered in the loop and
never removed, a loop over a list of callbacks that grows)."""

from __future__ import annotations

#: A holder whose count is estimated from a long container's ends was emptied in between only when
#: its old tensors are fewer than this share of what it held before (see `refilled`).
ESTIMATED_REFILL_SHARE = 0.1
#: Refilled on at least this many samples, each with more tensors than the last: filled anew each step.
MIN_ANEW = 3


def refilled(steps: list[int], count: list[float], old: list[float], estimated: list[float]) -> list[int]:
    """The samples at which the holder no longer held most of the tensors it held at the latest
    sample two or more steps before (they would count as old there). A holder that accumulates
    keeps what it held; one emptied or replaced in between (the tokens of the request in progress,
    a new list per request, an epoch's outputs cleared at its end) holds new tensors only, however
    many more than before. A long container's counts are estimated from its ends, and after steps
    no walk saw its newest end is all new: there only an end with next to nothing old
    (ESTIMATED_REFILL_SHARE) was emptied."""
    out = []
    for k in range(1, len(steps)):
        before = next((count[j] for j in range(k - 1, -1, -1) if steps[k] - steps[j] >= 2), 0.0)
        share = ESTIMATED_REFILL_SHARE if estimated[k] else 0.5
        if before >= 1 and old[k] < share * before:
            out.append(k)
    return out


def anew_growing(count: list[float], at: list[int]) -> bool:
    """Whether the holder was filled anew at every sample since its first (`at`, from `refilled`),
    with more tensors each time: what fills it runs more often every step."""
    rising = all(b > a for a, b in zip(count, count[1:], strict=False))
    return len(at) >= MIN_ANEW and at == list(range(1, len(count))) and rising


def anew_words(name: str) -> tuple[str, str]:
    """(evidence, fix) for a holder filled anew each step with ever more tensors."""
    return (
        f"{name} is filled anew on every sampled step (none of its tensors is older than the step), each "
        "time with more than the last: what fills it runs once more every step",
        f"`{name}` is refilled every step by something that runs once more each step: a hook registered "
        "inside the loop (`register_forward_hook`, `register_hook`) and never removed piles up, each copy "
        "adding to it. Register the hook once before the loop, or keep its handle and call `handle.remove()` "
        "when the step ends; a loop over a list (callbacks, metrics) that gains an entry every step does "
        "the same: stop that list from growing.",
    )
