"""How memleak writes and reads sizes."""

import pytest

from memleak.errors import UsageError
from memleak.units import fmt_bytes, parse_bytes


@pytest.mark.parametrize(
    ("n", "signed", "text"),
    [
        (0, True, "0 B"),
        (0.3, True, "+0.3 B"),  # a slope of a few bytes every ten steps is not "+0 B"
        (-0.25, False, "-0.25 B"),
        (5, True, "+5 B"),
        (1536, False, "1.5 KiB"),
        (-3 * 2**20, True, "-3.0 MiB"),
        (None, False, "-"),
        (float("nan"), True, "-"),
    ],
)
def test_fmt_bytes(n, signed, text):
    assert fmt_bytes(n, signed=signed) == text


def test_parse_bytes_reads_what_users_write_and_names_what_it_cannot():
    assert parse_bytes("512KiB") == 512 * 1024
    assert parse_bytes("1 MiB/step") == 2**20
    assert parse_bytes("2GB") == 2e9
    with pytest.raises(UsageError, match="cannot read 'lots'"):
        parse_bytes("lots")
