"""The profiles installed with perseus: the examples and the benchmark corpus's measured data.

A wheel carries them in ``perseus/profiles/`` (CMakeLists.txt installs them
there from ``examples/`` and ``bench/data/sosp24/``); a source checkout
without an installed wheel (the doctests of ``.ci/checks cxx``) finds them
at those original places instead. Either way one name means one file.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLES", "SOSP24_BLOCKING_POWER_W", "SOSP24_PROFILES", "shipped_profile"]

_PACKAGED = Path(__file__).resolve().parent / "profiles"
_SOURCE_TREE = Path(__file__).resolve().parents[2]

#: Example name -> its CSV in the source tree (its sidecar ``.json`` travels with it).
EXAMPLES = {
    "gpt3-a100-8stage": "examples/gpt3-a100-8stage.csv",
    "small-4stage": "examples/small-4stage.csv",
}
#: Measured SOSP '24 stage profiles (A100 SXM, 8 stages; NOTICE names their origin).
SOSP24_PROFILES = {
    "sosp24-gpt3-175b": "bench/data/sosp24/gpt3-175b+a100_sxm_bf16.csv",
    "sosp24-bloom-176b": "bench/data/sosp24/bloom+a100_sxm_bf16.csv",
}
#: The artifact's P2P blocking power for A100 SXM (bench/data/sosp24/README.md).
SOSP24_BLOCKING_POWER_W = 83.64


def shipped_profile(name: str) -> Path:
    """The CSV of a shipped profile, installed or in the source tree.

    Raises
    ------
    ValueError
        If `name` is not a shipped profile (the message lists them), or the
        installation lacks its file.
    """
    known = {**EXAMPLES, **SOSP24_PROFILES}
    if name not in known:
        raise ValueError(f"no shipped profile {name!r}; choose one of {', '.join(sorted(known))}")
    packaged = _PACKAGED / Path(known[name]).name
    if packaged.is_file():
        return packaged
    source = _SOURCE_TREE / known[name]
    if source.is_file():
        return source
    raise ValueError(
        f"the shipped profile {name!r} is missing from this installation ({packaged}); "
        "reinstall perseus"
    )
