"""Writing results: never replacing a file another run made, never losing a finished result.

Issue 26: two `perseus optimize` runs into one ``-o`` both said "written" and
one result was gone; a save that failed after the solve lost the solve; long
names failed for the temporary name's sake; killed writers left temporary
files for ever; names with escape sequences reached the terminal raw.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import perseus
import pytest
from perseus import _files
from perseus.cli import main
from perseus.errors import OutputExistsError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SMALL = EXAMPLES / "small-4stage.csv"


@pytest.fixture(scope="module")
def frontier():
    profile = perseus.Profile.from_csv(SMALL, blocking_power_w=70.0)
    return perseus.optimize(profile, microbatches=4)


def kept_files(directory):
    return sorted(p.name for p in Path(directory).iterdir() if ".kept-" in p.name)


def test_publish_never_replaces_and_keeps_the_result(tmp_path):
    target = tmp_path / "out.json"
    _files.publish_new_file(target, "first")
    with pytest.raises(OutputExistsError) as caught:
        _files.publish_new_file(target, "second")
    assert target.read_text() == "first"
    kept = Path(caught.value.kept_as)
    assert kept.parent == tmp_path
    assert kept.suffix == ".json"
    assert kept.read_text() == "second"
    assert str(kept) in str(caught.value)
    assert caught.value.errno == errno.EEXIST
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_publish_refuses_a_dangling_symlink(tmp_path):
    target = tmp_path / "out.json"
    target.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputExistsError):
        _files.publish_new_file(target, "x")
    assert not (tmp_path / "nowhere").exists()
    assert target.is_symlink()


def test_save_without_overwrite(tmp_path, frontier):
    target = tmp_path / "f.json"
    target.write_text("someone else's")
    with pytest.raises(OutputExistsError) as caught:
        frontier.save(target, overwrite=False)
    assert target.read_text() == "someone else's"
    assert len(perseus.Frontier.load(caught.value.kept_as)) == len(frontier)


def test_a_file_that_appears_during_the_solve_is_not_replaced(tmp_path, capsys, monkeypatch):
    """The other run's frontier appears after our check and before our save."""
    module = sys.modules["perseus.optimize"]

    real = module.optimize
    target = tmp_path / "out" / "frontier.json"

    def solve_while_another_run_finishes(*args, **kwargs):
        result = real(*args, **kwargs)
        target.parent.mkdir(exist_ok=True)  # the other run makes the folder as it saves
        target.write_text('{"the other run": 1}')
        return result

    monkeypatch.setattr(module, "optimize", solve_while_another_run_finishes)
    status = main(["optimize", str(SMALL), "-m", "4", "--blocking-power", "70", "-o",
                   str(tmp_path / "out"), "-q"])  # fmt: skip
    _, err = capsys.readouterr()
    assert status == 2
    assert err.count("\n") == 1
    assert "appeared while perseus was working" in err
    assert "kept as" in err
    assert json.loads(target.read_text()) == {"the other run": 1}
    (kept,) = kept_files(tmp_path / "out")
    assert kept in err
    assert perseus.Frontier.load(tmp_path / "out" / kept).spec.microbatches == 4


def test_two_real_runs_into_one_directory_lose_nothing(tmp_path):
    """Two console-script runs race into one -o: one writes, the other keeps its result aside
    or stops before solving; never two 'written' for one file."""
    script = shutil.which("perseus") or pytest.skip("no perseus console script")
    out = tmp_path / "out"
    out.mkdir()
    commands = [
        [script, "optimize", str(SMALL), "-m", m, "--blocking-power", "70", "-o", str(out), "-q"]
        for m in ("6", "4")
    ]
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for c in commands]  # fmt: skip
    results = [p.communicate(timeout=120) for p in processes]
    statuses = [p.returncode for p in processes]
    assert sorted(statuses) == [0, 2], results
    loser = results[statuses.index(2)][1]
    assert "already exists" in loser or "kept as" in loser, loser
    written = perseus.Frontier.load(out / "frontier.json").spec.microbatches
    assert written == (6, 4)[statuses.index(0)]
    if "kept as" in loser:
        (kept,) = kept_files(out)
        assert perseus.Frontier.load(out / kept).spec.microbatches == (6, 4)[statuses.index(2)]


@pytest.mark.parametrize("command", ["plan", "report"])
def test_plan_and_report_keep_their_result_when_raced(tmp_path, capsys, monkeypatch, command,
                                                      frontier):  # fmt: skip
    """The target appears between the early check and the write (simulated at the write)."""
    source = tmp_path / "f.json"
    frontier.save(source)
    real = _files.publish_new_file

    def raced(path, text):
        Path(path).write_text("raced")
        return real(path, text)

    monkeypatch.setattr(_files, "publish_new_file", raced)
    if command == "plan":
        args = ["plan", str(source), "--fastest", "--format", "json", "-o", str(tmp_path / "p")]
    else:
        args = ["report", str(source), "-o", str(tmp_path / "r.html")]
    status = main(args)
    _, err = capsys.readouterr()
    assert status == 2, err
    assert "kept as" in err, err


def test_a_failed_save_keeps_the_solve(tmp_path, capsys, monkeypatch):
    """The output directory fills up after the solve: the frontier is kept elsewhere."""
    import tempfile

    real_save = perseus.Frontier.save
    target = tmp_path / "out" / "frontier.json"
    fallback_dir = tmp_path / "fallback"
    fallback_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(fallback_dir))

    def disk_full_here(self, path, **kwargs):
        if Path(path) == target:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_save(self, path, **kwargs)

    monkeypatch.setattr(perseus.Frontier, "save", disk_full_here)
    status = main(["optimize", str(SMALL), "-m", "4", "--blocking-power", "70", "-o",
                   str(tmp_path / "out"), "-q"])  # fmt: skip
    _, err = capsys.readouterr()
    assert status == 2, err
    assert "No space left on device" in err, err
    assert "kept as" in err, err
    (copy,) = list(fallback_dir.iterdir())
    assert str(copy) in err
    assert perseus.Frontier.load(copy).spec.microbatches == 4


def test_names_of_255_bytes_can_be_written(tmp_path, frontier):
    for length in (242, 250, 255):
        target = tmp_path / ("f" * (length - 5) + ".json")
        frontier.save(target)
        assert len(perseus.Frontier.load(target)) == len(frontier)
        with pytest.raises(OutputExistsError) as caught:
            frontier.save(target, overwrite=False)
        assert len(os.path.basename(caught.value.kept_as)) <= 255


def test_orphaned_temporary_files_are_cleaned_up(tmp_path, frontier):
    old = time.time() - 2 * _files.ORPHAN_AGE_S
    orphans = [tmp_path / ".frontier.json.0badf00d.tmp", tmp_path / ".perseus-0123456789abcdef.tmp"]
    fresh = tmp_path / ".perseus-fedcba9876543210.tmp"  # another writer, still at work
    unrelated = tmp_path / ".notes.tmp"
    for path in (*orphans, fresh, unrelated):
        path.write_text("x")
    for path in (*orphans, unrelated):
        os.utime(path, (old, old))
    frontier.save(tmp_path / "frontier.json")
    assert not any(p.exists() for p in orphans)
    assert fresh.exists()
    assert unrelated.exists()


def test_output_that_is_a_file_says_so(tmp_path, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("a file")
    status = main(["optimize", str(SMALL), "-m", "4", "--blocking-power", "70", "-o",
                   str(blocker), "-q"])  # fmt: skip
    _, err = capsys.readouterr()
    assert status == 2
    assert "exists and is not a directory" in err
    assert "File exists" not in err


def test_names_with_escape_sequences_are_printed_escaped(tmp_path, capsys):
    out = tmp_path / "out\x1b]0;pwned\x07"
    status = main(["optimize", str(SMALL), "-m", "4", "--blocking-power", "70", "-o", str(out),
                   "-q"])  # fmt: skip
    printed, _ = capsys.readouterr()
    assert status == 0
    assert "\x1b" not in printed
    assert "\\x1b]0;pwned\\x07" in printed
    status = main(["show", str(tmp_path / "missing\x1b[2J.json")])
    _, err = capsys.readouterr()
    assert status == 2
    assert "\x1b" not in err
    assert "\\x1b[2J" in err


def test_memory_error_is_one_line(tmp_path, capsys, monkeypatch):
    module = sys.modules["perseus.optimize"]

    def out_of_memory(*args, **kwargs):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(module, "optimize", out_of_memory)
    status = main(["optimize", str(SMALL), "-m", "4", "--blocking-power", "70", "-o",
                   str(tmp_path), "-q"])  # fmt: skip
    _, err = capsys.readouterr()
    assert status == 2
    assert err.count("\n") == 1
    assert "out of memory" in err
    assert "try" in err


class _SignalledRightAfter(BaseException):
    """What a signal handler raises at the first bytecode after a file was created."""


@pytest.mark.parametrize("write", ["atomic", "publish", "probe", "exclusive"])
def test_an_exception_right_after_a_file_is_created_leaves_nothing(tmp_path, monkeypatch, write):
    # SIGTERM in the command line is an exception raised wherever Python is:
    # it can come right after os.open returns, before any later try.
    real_open = os.open

    def open_then_interrupt(path, flags, mode=0o777, **kwargs):
        descriptor = real_open(path, flags, mode, **kwargs)
        if flags & os.O_CREAT:
            os.close(descriptor)
            raise _SignalledRightAfter
        return descriptor

    monkeypatch.setattr(_files.os, "open", open_then_interrupt)
    target = tmp_path / "out"
    target.mkdir()
    writers = {
        "atomic": lambda: _files.write_text_atomically(target / "frontier.json", "{}"),
        "publish": lambda: _files.publish_new_file(target / "frontier.json", "{}"),
        "probe": lambda: _files.check_writable_directory(str(target)),
        # Where links are refused: the file itself is created exclusively.
        "exclusive": lambda: _files._create_exclusively(str(target / "frontier.json"), b"{}", ""),
    }
    with pytest.raises(_SignalledRightAfter):
        writers[write]()
    assert os.listdir(target) == []
    if write == "probe":  # the folders it made for the probe are gone too
        with pytest.raises(_SignalledRightAfter):
            _files.check_writable_directory(str(target / "made" / "here"))
        assert os.listdir(target) == []


def test_checking_a_new_output_folder_leaves_nothing_behind(tmp_path, monkeypatch):
    # The check makes the missing names inside a scratch folder of its own and
    # removes it: a command stopped before its output is written leaves no
    # empty folder, and a folder another run is about to write into is never
    # made or removed by this one's check.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in ("a/b/c", str(work / "d" / "e"), "new/../new2", "a/../../up", "x/.."):
        _files.check_writable_directory(name)
        assert os.listdir(work) == [], name
        assert os.listdir(tmp_path) == ["work"], name
    # `..` is the system's to resolve, as os.makedirs leaves it.
    _files.make_output_directory("new/../new2")
    assert sorted(os.listdir(work)) == ["new", "new2"]
    # A name too long for the file system fails the check, naming the output.
    with pytest.raises(OSError, match="cannot create the directory: File name too long"):
        _files.check_writable_directory("f" * 300 + "/g")
    # A parent that is a file, a dangling link and an empty name, as os.makedirs meets them.
    (work / "file").write_text("x")
    (work / "dangling").symlink_to(work / "nowhere")
    with pytest.raises(NotADirectoryError, match="cannot create the directory: Not a directory"):
        _files.check_writable_directory("file/sub")
    for name in ("dangling/sub", ""):
        with pytest.raises(FileNotFoundError, match="No such file or directory"):
            _files.check_writable_directory(name)
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        _files.check_writable_directory("file")
    assert sorted(os.listdir(work)) == ["dangling", "file", "new", "new2"]


def test_a_check_never_takes_away_a_folder_that_another_run_writes_into(tmp_path):
    """Runs starting (their check) beside a run saving into the same new folder:
    the save must always find its folder (with checks that made and removed the
    folder itself, 690 of 5,000 saves failed)."""
    import threading

    target = tmp_path / "race" / "new"
    stop = threading.Event()

    def keep_checking():
        while not stop.is_set():
            # The saver's own cleanup below may pull the folder from under a
            # check; what matters is that no check disturbs a save.
            with contextlib.suppress(OSError):
                _files.check_writable_directory(str(target))

    checker = threading.Thread(target=keep_checking)
    checker.start()
    try:
        for _ in range(500):
            _files.make_output_directory(str(target))
            _files.write_text_atomically(str(target / "frontier.json"), "{}")
            while target.exists():  # the next save finds it missing again
                # (a check's probe file may land in it meanwhile: try again)
                shutil.rmtree(target, ignore_errors=True)
    finally:
        stop.set()
        checker.join()


def test_a_name_through_a_link_and_dotdot_is_written_where_the_system_puts_it(
    tmp_path, monkeypatch
):
    # `link/../x` through link -> tgt/sub is tgt/x, not ./x: the temporary file
    # must go there too (it went beside ./x, and the finished solve was refused).
    (tmp_path / "tgt" / "sub").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    os.symlink(tmp_path / "tgt" / "sub", "link")
    _files.write_text_atomically("link/../atomic.json", "{}")
    _files.publish_new_file("link/../published.json", "{}")
    with pytest.raises(OutputExistsError) as kept:
        _files.publish_new_file("link/../published.json", "{}")
    assert os.path.dirname(os.path.realpath(kept.value.kept_as)) == str(tmp_path / "tgt")
    _files.replace_user_file("link/../replaced.json", "{}")
    assert sorted(os.listdir(work)) == ["link"]
    written = sorted(p.name for p in (tmp_path / "tgt").iterdir() if p.is_file())
    assert [name for name in written if ".kept-" not in name] == [
        "atomic.json",
        "published.json",
        "replaced.json",
    ]
