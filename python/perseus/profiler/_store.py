"""The profiler's files: the Zeus-format CSV and the JSON sidecar.

The sidecar is the source of truth: it holds every measurement with its
spread, the run's settings and the device, and is rewritten atomically
(temporary file, fsync, rename) after each measurement, then the CSV is
rewritten from it the same way. A crash or kill at any point leaves the
previous or the new version of each file, never a torn one, and a re-run
starts from the sidecar.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any, Optional

from .._files import write_text_atomically
from .._zeus_format import format_csv
from ._records import Measurement, ProfilerError

__all__ = ["FORMAT", "VERSION", "Store"]

FORMAT = "perseus-profiler-metadata"
VERSION = 1


def zeus_csv(measurements: list[Measurement]) -> str:
    """Every measurement as Zeus's ``stage,instruction,frequency,time,energy`` CSV."""
    return format_csv(
        (m.stage, m.instruction, m.frequency_mhz, m.time_s, m.energy_j) for m in measurements
    )


class Store:
    """The CSV at ``csv_path`` and its sidecar (same name, ``.json``); holds a lock on them.

    Parameters
    ----------
    csv_path
        Where the Zeus-format CSV goes; the sidecar is ``csv_path`` with the
        suffix ``.json``.
    resume
        Read the existing sidecar (if any) instead of starting over.
    """

    def __init__(self, csv_path: Path, *, resume: bool) -> None:
        self.csv_path = csv_path
        self.json_path = csv_path.with_suffix(".json")
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_path = csv_path.with_name(f".{csv_path.name}.lock")
        for _ in range(10):
            self._lock_file = open(self._lock_path, "w")  # noqa: SIM115
            try:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                self._lock_file.close()
                if error.errno in (errno.EAGAIN, errno.EACCES):
                    raise ProfilerError(
                        f"another profiler is writing {csv_path}; wait for it or choose another path"
                    ) from None
                raise
            # The lock file is removed by close(): a lock taken on a file that a
            # finishing run has just unlinked locks nothing; open the new one.
            if self._holds_lock_path():
                break
            self._lock_file.close()
        try:
            for name in (self.csv_path.name, self.json_path.name):
                for stale in csv_path.parent.glob(f".{name}.*.tmp"):  # left by a killed run
                    with contextlib.suppress(OSError):
                        stale.unlink()
            self.previous: Optional[dict[str, Any]] = None
            if resume and self.json_path.exists():
                self.previous = self._read()
            elif not resume:
                for path in (self.csv_path, self.json_path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
        except BaseException:
            self.close()
            raise

    def _read(self) -> dict[str, Any]:
        where = str(self.json_path)
        try:
            data = json.loads(self.json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ProfilerError(
                f"{where}: cannot resume from it ({error}); pass resume=False to start over"
            ) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ProfilerError(
                f"{where}: not a perseus profiler sidecar; pass resume=False to overwrite it"
            )
        if data.get("version") != VERSION:
            raise ProfilerError(
                f"{where}: sidecar version {data.get('version')!r}, this perseus writes {VERSION}; "
                "pass resume=False to start over"
            )
        try:
            data["measurements"] = [Measurement.from_json(m) for m in data.get("measurements", [])]
        except (KeyError, TypeError, ValueError) as error:
            raise ProfilerError(f"{where}: a measurement is malformed ({error!r})") from None
        return data

    def save(self, metadata: dict[str, Any], measurements: list[Measurement]) -> None:
        """Write the sidecar, then the CSV, each atomically."""
        data = dict(metadata)
        data["measurements"] = [m.to_json() for m in measurements]
        write_text_atomically(self.json_path, json.dumps(data, indent=1) + "\n")
        write_text_atomically(self.csv_path, zeus_csv(measurements))

    def record_status(self, status: str, error: str) -> None:
        """Set the sidecar's status and error in place, needing no new disk space.

        For when `save` cannot write (a full disk: its temporary file gets
        ENOSPC): the sidecar on disk is rewritten over its own bytes, compact
        and padded with spaces to its old length, so it stays valid JSON and
        takes no new block. Not atomic, unlike `save`: only for this last
        resort. Raises OSError if the file cannot be read or written, or if
        even the compact form would not fit.
        """
        with open(self.json_path, "r+b") as file:
            old = file.read()
            data = json.loads(old)
            data["status"] = status
            data["error"] = error
            new = json.dumps(data, separators=(",", ":")).encode()
            if len(new) + 1 > len(old):
                raise OSError(
                    errno.ENOSPC, "the status does not fit in the old sidecar", str(self.json_path)
                )
            file.seek(0)
            file.write(new + b" " * (len(old) - len(new) - 1) + b"\n")
            file.flush()
            os.fsync(file.fileno())

    def _holds_lock_path(self) -> bool:
        try:
            on_disk = os.stat(self._lock_path)
        except OSError:
            return False
        mine = os.fstat(self._lock_file.fileno())
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def close(self) -> None:
        if not self._lock_file.closed:
            # Removed while still locked, so no .p.csv.lock is left behind (issue 26).
            if self._holds_lock_path():
                with contextlib.suppress(OSError):
                    os.unlink(self._lock_path)
            self._lock_file.close()
