"""`perseus clockd`: a small privileged service that locks GPU clocks for unprivileged jobs.

``nvmlDeviceSetGpuLockedClocks`` needs root or CAP_SYS_ADMIN, which most
clusters do not give training jobs. Started once per node as root (a
systemd unit, see README), this service listens on a Unix socket; a
frequency switcher in a process that is not root sends its locked-clock
calls there (``cpp/clockd_client.cpp``; ``PERSEUS_CLOCKD_SOCKET``, default
``/run/perseus/clockd.sock``). The kernel tells the service who each client
is (``SO_PEERCRED``); rules given on the command line say which users or
groups may touch which GPUs. When a client's connection closes, which the
kernel does however the client died, the service resets every clock that
client still held: the watchdog's job, for that client.

Protocol: one request per line, ``sm_lock <uuid> <min> <max>``,
``sm_reset <uuid>``, ``mem_lock <uuid> <min> <max>``, ``mem_reset <uuid>``;
one answer per line, an NVML return code (0: done; 4, NO_PERMISSION: the
rules deny it; 2: a malformed request), a refusal followed by a space and
why (the GPU, the client, the rules), which the client puts in its error.

Several clients on one GPU: the GPU runs at the clock the latest asked for,
and is reset only when the last of them lets go.
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
import socket
import stat
import struct
import threading
from dataclasses import dataclass
from typing import Any, Optional

from . import _core
from ._stderr import say

__all__ = ["ClockService", "Rule", "parse_rule"]

_OK = 0
_INVALID_ARGUMENT = 2
_NO_PERMISSION = 4
_UNKNOWN = 999
_DOMAINS = {"sm": "SM", "mem": "memory"}


@dataclass(frozen=True)
class Rule:
    """Who may lock which GPUs: ``gpus`` (NVML indices or UUIDs; None: all) and one principal."""

    gpus: Optional[frozenset[str]]
    kind: str  #: "user", "group" or "any"
    ident: int  #: uid or gid (unused for "any")
    text: str = ""  #: as given to --allow (named in refusals)

    def allows(self, uuid: str, nvml_index: int, uid: int, gids: set[int]) -> bool:
        if self.gpus is not None and uuid not in self.gpus and str(nvml_index) not in self.gpus:
            return False
        if self.kind == "any":
            return True
        return self.ident == uid if self.kind == "user" else self.ident in gids


def parse_rule(text: str) -> Rule:
    """``GPUS:WHO``: GPUS is ``all`` or NVML indices / UUIDs joined by ``,``; WHO is
    ``user:NAME``, ``group:NAME``, ``uid:N``, ``gid:N`` or ``*``."""
    gpus_text, sep, who = text.partition(":")
    if not sep or not gpus_text or not who:
        raise ValueError(
            f"--allow {text!r}: expected GPUS:WHO, e.g. all:group:train or 0,1:user:alice"
        )
    gpus = None if gpus_text == "all" else frozenset(g for g in gpus_text.split(",") if g)
    if who == "*":
        return Rule(gpus, "any", -1, text)
    kind, sep, name = who.partition(":")
    try:
        if kind in ("uid", "gid") and sep:
            return Rule(gpus, "user" if kind == "uid" else "group", int(name), text)
        if kind == "user" and sep:
            return Rule(gpus, "user", pwd.getpwnam(name).pw_uid, text)
        if kind == "group" and sep:
            return Rule(gpus, "group", grp.getgrnam(name).gr_gid, text)
    except KeyError:
        raise ValueError(f"--allow {text!r}: no {kind} named {name!r} on this node") from None
    except ValueError:
        raise ValueError(f"--allow {text!r}: {kind} must be a number, got {name!r}") from None
    raise ValueError(f"--allow {text!r}: WHO must be user:NAME, group:NAME, uid:N, gid:N or *")


def _say(line: str) -> None:
    try:
        say(f"perseus clockd: {line}", flush=True)
    except Exception:  # noqa: BLE001 - a lost log never stops the service
        pass


class _Client:
    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        self.pid, self.uid, gid = struct.unpack("3i", creds)
        self.gids = {gid}
        try:
            self.gids.update(os.getgrouplist(pwd.getpwuid(self.uid).pw_name, gid))
        except KeyError:  # a uid without a passwd entry: its primary group only
            pass
        self.held: set[tuple[str, str]] = set()  # (uuid, "sm" | "mem")
        self.refusal = ""  # why the last request was refused, for its answer

    def __str__(self) -> str:
        return f"pid {self.pid} (uid {self.uid})"

    def who(self) -> str:
        try:
            name = f" ({pwd.getpwuid(self.uid).pw_name})"
        except KeyError:
            name = " (no passwd entry)"
        groups = ",".join(str(g) for g in sorted(self.gids))
        return f"uid {self.uid}{name}, gids {groups}"


class ClockService:
    """Serves ``socket_path`` until :meth:`stop`; see the module's docstring."""

    def __init__(self, socket_path: str, rules: list[Rule], mode: int = 0o666) -> None:
        self.socket_path = socket_path
        self.rules = rules
        self.mode = mode
        self._lock = threading.Lock()  # NVML calls and the books
        self._devices: dict[str, Any] = {}
        self._holders: dict[tuple[str, str], list[_Client]] = {}
        self._server: Optional[socket.socket] = None
        self._stopping = threading.Event()

    # -- the books ----------------------------------------------------------

    def _device(self, uuid: str) -> Any:
        if uuid not in self._devices:
            self._devices[uuid] = _core.NvmlDevice.from_uuid(uuid)
        return self._devices[uuid]

    def _allowed(self, client: _Client, uuid: str, nvml_index: int) -> bool:
        if client.uid == 0:
            return True
        return any(r.allows(uuid, nvml_index, client.uid, client.gids) for r in self.rules)

    def _refusal(self, client: _Client, request: str, uuid: str, nvml_index: int) -> str:
        """One line for the refused client: the GPU, who asked, the rules, the fix."""
        rules = ", ".join(r.text or "?" for r in self.rules) or "none: only root may"
        return (
            f"perseus clockd at {self.socket_path} refused {request} on GPU {uuid} "
            f"(NVML {nvml_index}) to {client.who()}: no --allow rule covers this GPU for them "
            f"(its rules: {rules}); the node's administrator can add one, "
            f"e.g. --allow {nvml_index}:uid:{client.uid}"
        )

    @staticmethod
    def _code(call: Any, *args: int) -> int:
        try:
            call(*args)
        except _core.NvmlError as error:
            return int(error.code)
        return _OK

    def _release(self, client: _Client, key: tuple[str, str]) -> int:
        """``client`` lets go of ``key``; the GPU is reset when nobody holds it. Lock held."""
        holders = self._holders.get(key, [])
        if client in holders:
            holders.remove(client)
        client.held.discard(key)
        if holders:
            return _OK
        self._holders.pop(key, None)
        gpu = self._device(key[0])
        reset = gpu.reset_locked_clocks if key[1] == "sm" else gpu.reset_memory_locked_clocks
        return self._code(reset)

    def handle(self, client: _Client, line: str) -> int:
        """One request; returns the NVML code to answer."""
        parts = line.split()
        if not parts or parts[0] not in ("sm_lock", "sm_reset", "mem_lock", "mem_reset"):
            return _INVALID_ARGUMENT
        domain, action = parts[0].split("_")
        if len(parts) != (4 if action == "lock" else 2):
            return _INVALID_ARGUMENT
        uuid = parts[1]
        with self._lock:
            try:
                gpu = self._device(uuid)
            except (_core.NvmlError, IndexError):
                return _INVALID_ARGUMENT
            if not self._allowed(client, uuid, gpu.nvml_index):
                _say(f"denied {parts[0]} on GPU {uuid} (NVML {gpu.nvml_index}) to {client}")
                client.refusal = self._refusal(client, parts[0], uuid, gpu.nvml_index)
                return _NO_PERMISSION
            key = (uuid, domain)
            if action == "reset":
                return self._release(client, key) if key in client.held else _OK
            try:
                low, high = int(parts[2]), int(parts[3])
            except ValueError:
                return _INVALID_ARGUMENT
            if not 0 < low <= high <= _core.MAX_CLOCK_MHZ:
                return _INVALID_ARGUMENT
            lock = gpu.set_locked_clocks if domain == "sm" else gpu.set_memory_locked_clocks
            code = self._code(lock, low, high)
            if code == _OK and key not in client.held:
                client.held.add(key)
                self._holders.setdefault(key, []).append(client)
            return code

    def _gone(self, client: _Client) -> None:
        with self._lock:
            held = sorted(client.held)
            results = [(key, self._release(client, key)) for key in held]
        for (uuid, domain), code in results:
            state = "reset" if code == _OK else f"NOT reset (NVML error {code})"
            _say(
                f"client {client} disconnected holding GPU {uuid}: {_DOMAINS[domain]} clocks {state}"
            )

    # -- serving ------------------------------------------------------------

    def _serve_client(self, conn: socket.socket) -> None:
        client = _Client(conn)
        try:
            with conn, conn.makefile("rwb", buffering=0) as stream:
                for raw in stream:
                    client.refusal = ""
                    code = self.handle(client, raw.decode("ascii", "replace"))
                    why = f" {client.refusal}" if client.refusal else ""
                    stream.write(f"{code}{why}\n".encode("ascii", "replace"))
        except OSError:
            pass
        finally:
            self._gone(client)

    def bind(self) -> None:
        """Creates the socket (replacing a stale one) with ``mode``."""
        path = self.socket_path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        os.chmod(path, self.mode)
        server.listen(64)
        self._server = server

    def serve_forever(self) -> None:
        if self._server is None:
            self.bind()
        assert self._server is not None
        _say(f"listening on {self.socket_path} ({len(self.rules)} rule(s); root may always)")
        while not self._stopping.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                if self._stopping.is_set():
                    break
                raise
            threading.Thread(target=self._serve_client, args=(conn,), daemon=True).start()

    def stop(self) -> None:
        """Stops accepting, resets every clock a client still holds, removes the socket."""
        self._stopping.set()
        if self._server is not None:
            try:
                self._server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._server.close()
        with self._lock:
            keys = list(self._holders)
            for key in keys:
                for client in list(self._holders.get(key, [])):
                    self._release(client, key)
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        if keys:
            _say(f"stopped: reset {len(keys)} clock lock(s) clients still held")


def run(socket_path: str, rules: list[Rule], mode: int) -> int:
    """The command: serve until SIGTERM, SIGINT or SIGHUP, then give every clock back."""
    service = ClockService(socket_path, rules, mode)

    def on_signal(_signum: int, _frame: Any) -> None:
        threading.Thread(target=service.stop, daemon=True).start()

    # Before the socket appears: a client (or a test) that sees it may signal at
    # once, and a SIGINT between the two ended the service by KeyboardInterrupt
    # (exit 130) instead of this stop (CI, 2026-12-08).
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # a closed terminal; nohup keeps it off
        signal.signal(signal.SIGHUP, on_signal)
    service.bind()
    service.serve_forever()
    service.stop()
    return 0
