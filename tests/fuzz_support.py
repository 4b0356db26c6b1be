"""Shared by the fuzz tests: a tally of how the fuzzed cases end.

Set PERSEUS_FUZZ_LOG to a file name and every fuzz case appends one line,
``test<TAB>outcome``, where outcome is "valid" or the kind of clean error;
`python tests/fuzz_support.py FILE` then prints the counts.
"""

from __future__ import annotations

import collections
import os
import re
import sys

from hypothesis import HealthCheck, settings


def fuzz_settings(examples: int) -> settings:
    """`examples` under the default "ci" profile, scaled with the loaded one ("thorough": 20x)."""
    return settings(
        max_examples=max(1, examples * settings.default.max_examples // 100),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def tally(outcome: str) -> None:
    """Record one case's outcome, under the running test's name, when PERSEUS_FUZZ_LOG is set."""
    log = os.environ.get("PERSEUS_FUZZ_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0].split("[")[0]
        with open(log, "a", encoding="utf-8") as file:
            file.write(f"{test}\t{outcome}\n")


def error_kind(message: str) -> str:
    """A short class for an error message: its last ': '-separated part, digits folded."""
    text = re.sub(r"/\S+", "FILE", message)
    text = re.sub(r"\[\d+\]", "[i]", text)
    text = re.sub(r"line \d+", "line N", text)
    head = text.split(": ")[-1] if ": " in text else text
    return re.sub(r"[-+]?\d[\d.e+-]*", "#", head)[:60]


if __name__ == "__main__":
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    with open(sys.argv[1], encoding="utf-8") as file:
        for line in file:
            test, _, outcome = line.rstrip("\n").partition("\t")
            counts[test, outcome] += 1
    for test in sorted({t for t, _ in counts}):
        total = sum(n for (t, _), n in counts.items() if t == test)
        print(f"{test}: {total} cases")
        for (t, outcome), n in counts.most_common():
            if t == test:
                print(f"  {n:5d}  {outcome}")
