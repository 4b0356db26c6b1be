"""Packaging: what a wheel or an sdist of perseus carries, and what its metadata claims.

- Concurrent ``pip install .`` of one checkout cannot collide: scikit-build-core
  builds in a fresh temporary folder per build unless ``[tool.scikit-build]
  build-dir`` names one, so pyproject.toml must not set it (a developer who
  wants incremental rebuilds passes ``-Cbuild-dir=...``; CONTRIBUTING.md).
- One version source (pyproject.toml), LICENSE and NOTICE installed, the
  shipped profiles installed and identical to the source tree's.
- The claims agree: classifiers, requires-python, cibuildwheel's builds
  (``cibuildwheel --print-build-identifiers``), the release workflow.
- The README's links resolve to files of the tree, and the sdist holds what its
  own tests need and passes them outside a git checkout.

Tests that need a packaging tool (cibuildwheel, check-jsonschema, PyYAML,
scikit-build-core) skip without it, saying so, unless
``PERSEUS_REQUIRE_PACKAGING_TOOLS=1`` (.ci/run sets it after installing
``.ci/requirements-wheel.txt``) turns the skip into a failure.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path
from typing import Any

import perseus
import pytest
from perseus._shipped import EXAMPLES, SOSP24_PROFILES, shipped_profile
from perseus.cli import main

ROOT = Path(__file__).resolve().parents[1]
DIST = "perseus-energy"


def _require(module: str) -> Any:
    if os.environ.get("PERSEUS_REQUIRE_PACKAGING_TOOLS") == "1":
        return __import__(module)
    return pytest.importorskip(module)


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        if os.environ.get("PERSEUS_REQUIRE_PACKAGING_TOOLS") == "1":
            pytest.fail(f"{name} is not installed (pip install -r .ci/requirements-wheel.txt)")
        pytest.skip(f"{name} is not installed (pip install -r .ci/requirements-wheel.txt)")
    return found


def _pyproject() -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = _require("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f))


def _claimed_minors() -> list[int]:
    """Python 3 minor versions the classifiers claim."""
    classifiers = _pyproject()["project"]["classifiers"]
    return sorted(
        int(m[1])
        for c in classifiers
        if (m := re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c))
    )


def test_no_build_folder_shared_between_builds() -> None:
    skbuild = _pyproject()["tool"]["scikit-build"]
    assert "build-dir" not in skbuild, (
        "pyproject.toml sets [tool.scikit-build] build-dir; concurrent `pip install .` "
        "of this checkout would share it"
    )
    assert "build_dir" not in skbuild


def test_the_version_is_written_once_and_read_from_the_metadata() -> None:
    declared = _pyproject()["project"]["version"]
    assert metadata.version(DIST) == declared, "the installed perseus is not this checkout's"
    assert perseus.__version__ == declared
    source = (ROOT / "python" / "perseus" / "__init__.py").read_text()
    assert declared not in source, "__init__.py writes the version a second time"
    done = subprocess.run(
        [sys.executable, "-m", "perseus", "--version"], capture_output=True, text=True
    )
    assert done.stdout.strip() == f"perseus {declared}", done.stdout + done.stderr


def test_license_and_notice_are_installed() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    notice = (ROOT / "NOTICE").read_text()
    # The SOSP '24 data: where it came from (the commit bench/data/sosp24/README.md names) and its licence.
    commit = re.search(r"commit ([0-9a-f]{40})", (ROOT / "bench/data/sosp24/README.md").read_text())
    assert commit
    assert commit[1] in notice
    assert "Apache License, Version 2.0" in notice
    installed = {Path(str(f)).name: f for f in metadata.files(DIST) or []}
    for name in ("LICENSE", "NOTICE"):
        assert name in installed, f"{name} is not in the installed distribution"
        assert installed[name].read_text() == (ROOT / name).read_text()
    meta = metadata.metadata(DIST)
    assert meta["License-Expression"] == "Apache-2.0"


def test_shipped_profiles_are_installed_and_match_the_source_tree() -> None:
    cmake = (ROOT / "CMakeLists.txt").read_text()
    installed_dir = Path(perseus.__file__).parent / "profiles"
    for name, relative in {**EXAMPLES, **SOSP24_PROFILES}.items():
        assert relative in cmake, f"CMakeLists.txt does not install {relative}"
        source = ROOT / relative
        path = shipped_profile(name)
        assert path.is_file()
        if installed_dir.is_dir():  # an installed wheel, not the source tree on sys.path
            assert path.parent == installed_dir, path
        assert hashlib.sha256(path.read_bytes()).digest() == (
            hashlib.sha256(source.read_bytes()).digest()
        )
        if name in EXAMPLES:  # the blocking power travels with the example
            assert (
                path.with_suffix(".json").read_bytes() == source.with_suffix(".json").read_bytes()
            )
    from_source = Path(perseus.__file__).resolve().parent == ROOT / "python" / "perseus"
    if not from_source:  # an editable install imports the source tree, which has no profiles/
        assert installed_dir.is_dir(), f"the installed perseus has no {installed_dir}"
    with pytest.raises(ValueError, match="gpt3-a100-8stage"):
        shipped_profile("gpt4-imaginary")


def test_optimize_runs_a_shipped_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["optimize", "--example", "small-4stage", "-m", "4", "-o", str(tmp_path), "-q"]) == 0
    )
    assert (tmp_path / "frontier.json").is_file()
    assert "small-4stage.json" in capsys.readouterr().out  # the blocking power's sidecar
    assert main(["optimize", "-m", "4", "-o", str(tmp_path)]) == 2
    assert "give a PROFILE or --example" in capsys.readouterr().err
    profile = str(shipped_profile("small-4stage"))
    assert main(["optimize", profile, "--example", "small-4stage", "-m", "4"]) == 2
    assert main(["optimize", "--example", "nope", "-m", "4"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_classifiers_requires_python_and_cibuildwheel_agree() -> None:
    config = _pyproject()
    minors = _claimed_minors()
    assert minors == list(range(minors[0], minors[-1] + 1)), minors
    assert config["project"]["requires-python"] == f">=3.{minors[0]}"
    build = config["tool"]["cibuildwheel"]["build"].split()
    assert build == [f"cp3{m}-*" for m in minors]
    assert config["tool"]["cibuildwheel"]["linux"]["archs"] == ["x86_64", "aarch64"]
    assert config["tool"]["cibuildwheel"]["test-command"]
    assert config["tool"]["ruff"]["target-version"] == f"py3{minors[0]}"


def test_cibuildwheel_builds_every_claimed_python_on_both_architectures() -> None:
    exe = _tool("cibuildwheel")
    done = subprocess.run(
        [exe, "--print-build-identifiers", "--platform", "linux", "--archs", "x86_64,aarch64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = {
        f"cp3{m}-manylinux_{arch}" for m in _claimed_minors() for arch in ("x86_64", "aarch64")
    }
    assert set(done.stdout.split()) == expected


def test_release_workflow_builds_on_a_tag_with_the_checked_cibuildwheel() -> None:
    yaml = _require("yaml")
    path = ROOT / ".github" / "workflows" / "release.yml"
    workflow = yaml.safe_load(path.read_text())
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert on["push"]["tags"] == ["v*"]
    jobs = workflow["jobs"]
    assert set(jobs) == {"sdist", "wheels", "publish"}
    assert jobs["wheels"]["strategy"]["matrix"]["os"] == ["ubuntu-24.04", "ubuntu-24.04-arm"]
    uses = [s.get("uses", "") for s in jobs["wheels"]["steps"]]
    pinned = re.search(
        r"^cibuildwheel==(\S+)$", (ROOT / ".ci/requirements-wheel.txt").read_text(), re.M
    )
    assert pinned, uses
    assert f"pypa/cibuildwheel@v{pinned[1]}" in uses, uses
    assert set(jobs["publish"]["needs"]) == {"sdist", "wheels"}
    exe = _tool("check-jsonschema")
    done = subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_links_resolve_and_no_repository_url_is_guessed() -> None:
    # perseus has no public repository yet, so no absolute link to one can be
    # checked: the README keeps relative links, each of which must name a
    # file in this tree (and so in the sdist), and the metadata names no URL.
    # On PyPI the two relative links (the plot, ARCHITECTURE.md) will not
    # render until the repository's address exists and replaces them.
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r'(?:src|href)="([^"]+)"', text)
    assert targets, "no links found; the pattern is wrong"
    relative = [t for t in targets if not re.match(r"(https?://|#|mailto:)", t)]
    missing = [t for t in relative if not (ROOT / t.split("#")[0]).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"
    assert "urls" not in _pyproject()["project"]
    assert _pyproject()["project"]["readme"] == "README.md"
    assert "CHANGELOG.md" in {p.name for p in ROOT.iterdir()}


def _build_sdist(out: Path) -> Path:
    _require("scikit_build_core")
    code = (
        "import sys; from scikit_build_core.build import build_sdist; "
        "print(build_sdist(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return out / done.stdout.strip().splitlines()[-1]


def test_sdist_carries_its_tests_and_passes_them_outside_git(tmp_path: Path) -> None:
    if os.environ.get("PERSEUS_IN_SDIST_TEST") == "1":
        pytest.skip("already inside the sdist's own test run")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (this is the sdist's own run)")
    sdist = _build_sdist(tmp_path)
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        members = tar.getmembers()
        if sys.version_info >= (3, 12):
            tar.extractall(tmp_path / "unpacked", filter="data")
        else:
            tar.extractall(tmp_path / "unpacked")  # our own archive, just built
    for needed in (
        "LICENSE",
        "NOTICE",
        "CHANGELOG.md",
        "pyproject.toml",
        "examples/gpt3-a100-8stage.csv",
        "examples/gpt3-a100-8stage.json",
        "bench/data/sosp24/gpt3-175b+a100_sxm_bf16.csv",
        "tests/test_docs.py",
        "tests/test_packaging.py",
        "docs/frontier.png",
    ):
        assert needed in names, f"the sdist lacks {needed}"
    assert not [n for n in names if n.startswith((".ci-venv/", "build/", "dist/", ".git/"))]
    assert all(m.isfile() or m.isdir() for m in members), "links in the sdist"
    (root,) = (tmp_path / "unpacked").iterdir()
    env = {
        **os.environ,
        "PERSEUS_IN_SDIST_TEST": "1",
        "GIT_CEILING_DIRECTORIES": str(tmp_path),  # git must not find this checkout above it
        "MPLBACKEND": "Agg",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    # The installed perseus (this checkout's); the sdist's tests, from its own tree.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_docs.py",
            "tests/test_packaging.py",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout, tail
    assert " failed" not in done.stdout, tail
    assert importlib.util.find_spec("perseus") is not None
