"""The docs run: every example in README.md and in perseus's docstrings is executed here.

README blocks run in the order they appear, in one scratch directory that
has ``examples/``: ```` ```bash ```` blocks with bash (``set -euo pipefail``,
the ``perseus`` console script on PATH), ```` ```python ```` blocks with
exec. A block that cannot run here (it installs packages, or needs a GPU,
torch or megatron-core) says so on the line before it:
``<!-- readme-test: skip: REASON -->``; the reason is required.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import perseus
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SKIP = re.compile(r"<!-- readme-test: skip: (?P<reason>[^>]*\S)\s*-->")
FENCE = re.compile(r"^```(?P<language>\w*)\n(?P<code>.*?)^```$", re.S | re.M)


def readme_blocks():
    text = README.read_text(encoding="utf-8")
    blocks = []
    for number, match in enumerate(FENCE.finditer(text), 1):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.fullmatch(before.strip())
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(
            (
                f"block{number}-line{line}-{match['language'] or 'text'}",
                match["language"],
                match["code"],
                skip["reason"] if skip else None,
            )
        )
    return blocks


BLOCKS = readme_blocks()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("readme")
    (directory / "examples").symlink_to(ROOT / "examples")
    return directory


def environment():
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.mark.parametrize(("name", "language", "code", "skip"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_readme_block(workdir, monkeypatch, name, language, code, skip):
    if skip is not None:
        pytest.skip(f"README {name}: {skip}")
    if language == "bash":
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + code],
            cwd=workdir,
            env=environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"README {name} failed:\n{code}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        assert "warning" not in done.stderr, done.stderr
    elif language == "python":
        pytest.importorskip("matplotlib") if "plot" in code else None
        monkeypatch.chdir(workdir)
        monkeypatch.setenv("MPLBACKEND", "Agg")
        namespace: dict[str, object] = {"__name__": "__readme__"}
        try:
            exec(compile(code, f"README.md:{name}", "exec"), namespace)
        finally:
            if "plot" in code:
                import matplotlib.pyplot as plt

                plt.close("all")
    else:
        pytest.fail(f"README {name}: a ```{language} block neither runs nor says why it is skipped")


def test_every_skipped_block_says_why():
    skipped = [(name, reason) for name, _, _, reason in BLOCKS if reason is not None]
    assert all(len(reason) > 20 for _, reason in skipped), skipped
    run = [name for name, _, _, reason in BLOCKS if reason is None]
    assert len(run) >= 3  # the walkthrough, its sequel, the Python API


def test_walkthrough_made_what_the_readme_promises(workdir):
    """After the README's commands: a Zeus plan, a per-GPU CSV, two PNGs and the report."""
    if not (workdir / "out" / "frontier.json").exists():
        pytest.skip("the walkthrough blocks did not run (selected alone?)")
    out = workdir / "out"
    assert list((out / "plans").glob("freqs_pipeline_*.py"))
    assert (
        (out / "plans" / "plan.csv")
        .read_text()
        .startswith("gpu,position,instruction,chunk,microbatch,frequency_mhz\n")
    )
    for png in ("frontier.png", "timeline.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")
    assert "<svg" in (out / "report.html").read_text()


def test_readme_image_is_committed():
    assert (ROOT / "docs" / "frontier.png").read_bytes().startswith(b"\x89PNG")
    assert "](docs/frontier.png)" in README.read_text()


# --- docstrings ----------------------------------------------------------------------------


def modules_with_examples():
    names = ["perseus"]
    for info in pkgutil.walk_packages(perseus.__path__, "perseus."):
        if not info.name.endswith(("__main__", "_watchdog")):  # scripts: importing them runs them
            names.append(info.name)
    found = []
    finder = doctest.DocTestFinder()
    for name in sorted(names):
        module = importlib.import_module(name)
        tests = [t for t in finder.find(module, name) if t.examples]
        if tests:
            found.append(name)
    return found


DOCTEST_MODULES = modules_with_examples()


def test_docstring_examples_are_found():
    # The API's own examples: optimize, the package, Zeus files, power, power caps.
    for name in ("perseus", "perseus.optimize", "perseus.frontier"):
        assert name in DOCTEST_MODULES


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples read examples/*.csv
    module = importlib.import_module(name)
    globs = {"perseus": perseus, "tmp": tmp_path}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(module, name, globs={**vars(module), **globs}):
        if test.examples:
            runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} docstring example(s) failed in {name}"


# --- ARCHITECTURE.md and the README's Layout match the tree ----------------------------------

_TABLES = {"cpp/": "cpp", "bindings/": "bindings", "python/perseus/": "python/perseus"}


def _architecture_rows() -> dict[str, set[str]]:
    """The first-column entries of ARCHITECTURE.md's tables, by the section's folder."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    rows: dict[str, set[str]] = {folder: set() for folder in _TABLES.values()}
    folder = None
    for line in text.splitlines():
        if line.startswith("## "):
            folder = next((f for key, f in _TABLES.items() if f"(`{key}`" in line), None)
        elif folder and line.startswith("| `"):
            rows[folder].add(line.split("`")[1])
    return rows


def _expand(entry: str) -> list[str]:
    """``dag.{hpp,cpp}`` -> ``dag.hpp``, ``dag.cpp``."""
    match = re.fullmatch(r"(.*)\.\{(.*)\}", entry)
    return [f"{match[1]}.{ext}" for ext in match[2].split(",")] if match else [entry]


def _sources(folder: str) -> set[str]:
    # Outside a checkout (an unpacked sdist) there is no git index: every file
    # on disk under the folder is a source, less build outputs.
    try:
        listed = subprocess.run(
            ["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError:  # no git on this machine
        listed = None
    if listed is not None and listed.returncode == 0 and listed.stdout.strip():
        tracked = listed.stdout.split()
    else:
        tracked = [
            path.relative_to(ROOT).as_posix()
            for path in sorted((ROOT / folder).rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        ]
    found = set()
    for path in tracked:
        relative = path[len(folder) + 1 :]
        if relative.endswith((".cpp", ".hpp", ".py")):
            top = relative.split("/")[0]
            # Subpackages with one concept each are listed as a folder, except cli/.
            found.add(relative if top in ("cli",) or "/" not in relative else top + "/")
    return found


@pytest.mark.parametrize("folder", sorted(_TABLES.values()))
def test_architecture_lists_every_source_file_and_nothing_else(folder):
    listed = set()
    for entry in _architecture_rows()[folder]:
        listed.update(_expand(entry))
    for entry in listed:
        assert (ROOT / folder / entry).exists(), (
            f"ARCHITECTURE.md lists {folder}/{entry}, not in the tree"
        )
    missing = _sources(folder) - listed
    assert not missing, f"ARCHITECTURE.md does not list {sorted(missing)} under {folder}/"


def test_readme_layout_names_every_module():
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    for folder in ("cpp", "python/perseus"):
        for path in _sources(folder):
            stem = path.split(".")[0].rstrip("/").removeprefix("cli/")
            if stem in ("__init__", "__main__", "index", "pybind11") or stem.startswith("_"):
                continue  # package glue and private helpers are ARCHITECTURE.md's business
            assert f"`{stem}`" in layout or f"`{stem}/`" in layout, (
                f"README Layout misses {folder}/{path}"
            )
