"""A holder of one tensor made anew each step whose size rose on the sampled steps: a tensor grown
by concatenation onto itself (`kept = torch.cat([kept, new])`: a leak), or one that is merely larger
each time (random sequence lengths, a batch-size ramp, the outputs of a model that grows): the walk
writes checksums of its first and last values (probes/fingerprint.py), and a concatenation keeps
one end from each sample to the next. The holder detector reports it with `bytes_only` and `ends`
in its data; `suspects.rank` asks `unconfirmed`."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

from ..schema import Finding, finding_data

#: A holder of one fresh tensor a step leaks (a tensor concatenated onto itself) only if its size rose
#: at each of this many samples at least: a size that merely varies (random sequence lengths) rises
#: at 5 samples in a row once in 120 runs, and at 3 or 4 often enough in a short run.
STEADY_SAMPLES = 5


def unconfirmed(f: Finding, measured_bps: float, growing_model: list[str]) -> Finding:
    """A holder that keeps one fresh tensor a step, whose size alone rose on the sampled steps, is no
    leak unless it rose at every sample (STEADY_SAMPLES or more) and memory rises with it: otherwise
    the sizes merely vary (random sequence lengths), and a few samples happened to rise. Nor is it
    where the model gains registered parameters or modules (`growing_model`, detect/registered.py):
    the step's outputs grow with the model."""
    if not (f.leak and finding_data(f).get("bytes_only")):
        return f
    if growing_model:
        names = ", ".join(growing_model[:2])
        note = f"the one tensor it holds is new each step, and its size follows the model's: {names} gains entries"
        fix = f"None needed for this tensor: it is made anew each step at the model's size. Stop {names} growing."
        return replace(f, leak=False, evidence=(*f.evidence, note), fix=fix)
    if new_values(f.data.get("ends") or ()):
        note = (
            "the one tensor it holds is new each step, with new values at both ends (nothing carried over "
            "from the step before, as `torch.cat([kept, new])` would): a larger batch or sequence each step"
        )
        fix = "None needed if the batch or sequence is meant to grow (a ramp, a curriculum); check that it stops."
        return replace(f, leak=False, evidence=(*f.evidence, note), fix=fix)
    sizes = list(itertools.dropwhile(lambda b: b == 0, f.data.get("bytes") or []))  # from its first tensor on
    steady = len(sizes) >= STEADY_SAMPLES and all(b > a for a, b in zip(sizes, sizes[1:], strict=False))
    if steady and measured_bps >= 0.5 * f.bytes_per_step:
        return f
    why = "memory does not rise with it" if steady else "its size did not rise at every sample"
    note = f"{why}: the one tensor it holds is new each step, and only its size varies"
    return replace(f, leak=False, evidence=(*f.evidence, note))


def new_values(ends: Sequence[str]) -> bool:
    """Whether a lone tensor's values (`ends`, per sample: 'head:tail' checksums) are new at both ends
    from each sample to the next (STEADY_SAMPLES of them at least, each with a fingerprint)."""
    if len(ends) < STEADY_SAMPLES or not all(ends):
        return False
    pairs = [(a.split(":"), b.split(":")) for a, b in zip(ends, ends[1:], strict=False)]
    return all(a[0] != b[0] and a[1] != b[1] for a, b in pairs)
