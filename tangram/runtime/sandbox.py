"""Per-trajectory sandboxes that run one action at a time as a confined subprocess.

A sandbox is a working directory on one node that keeps its files across the
actions of its trajectory (state stays, compute moves). Every action runs as a
subprocess in it with

- exactly the granted cores (``sched_setaffinity`` on the granted core ids);
- ``setrlimit`` limits: address space (memory), CPU time, processes, file size;
- a wall-clock timeout that kills the whole process group;
- no network and a private filesystem view through bubblewrap (``bwrap``):
  read-only system and Python directories, the sandbox directory as the only
  writable place, a fresh ``/tmp``, ``/proc`` and ``/dev``.

Without ``bwrap`` (a warning is logged once) the action still gets a new session,
the limits, a scrubbed environment and its cwd in the sandbox, and loses the
network through ``unshare -n`` where that works. Running as root, the action drops
to a per-sandbox unprivileged uid (``setpriv``), because the kernel does not
enforce the process limit for root and the uid keeps sandboxes' counts apart.

Pure Python: no Ray. :class:`Sandboxes` is what a node agent holds.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from tangram.model.instance import Frozen, Id, PositiveSeconds

log = logging.getLogger(__name__)

Reason = Literal["ok", "nonzero_exit", "timeout", "memory", "killed"]
Isolation = Literal["bwrap", "unshare", "none"]

INSIDE = "/sandbox"  # where the sandbox directory appears under bwrap
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_SYSTEM_DIRS = ("/usr", "/etc/alternatives", "/opt")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
              "/etc/hosts", "/etc/ssl")
_ROOT_LINKS = ("/bin", "/lib", "/lib64", "/lib32", "/sbin")


class Limits(Frozen):
    """Resource limits of one action. ``None`` leaves a limit unset."""

    timeout_s: PositiveSeconds = Field(default=30.0, description="Wall-clock limit, seconds.")
    cpu_s: int | None = Field(default=60, ge=1, description="RLIMIT_CPU, CPU seconds.")
    memory_mb: int | None = Field(default=2048, ge=16, description="RLIMIT_AS, MiB of address space.")
    processes: int | None = Field(default=64, ge=1, description="RLIMIT_NPROC, processes of the sandbox uid.")
    file_size_mb: int | None = Field(default=64, ge=0, description="RLIMIT_FSIZE, MiB per written file.")
    output_bytes: int = Field(default=64 * 1024, ge=0, description="Kept bytes of stdout and of stderr.")


class Command(Frozen):
    """What a CPU action runs: an argv, or Python source run by the sandbox's interpreter."""

    argv: tuple[str, ...] = ()
    code: str | None = Field(default=None, description="Python source; written to a file of its own and run.")
    files: dict[str, str] = Field(default_factory=dict, description="Relative path -> text written first.")
    stdin: str = ""
    env: dict[str, str] = Field(default_factory=dict, description="Added to the scrubbed environment.")
    limits: Limits | None = Field(default=None, description="Overrides the sandbox defaults.")


class RunResult(Frozen):
    """What one action produced, with its timings (epoch seconds) and the cores it ran on."""

    exit_code: int = Field(description="Exit status; -N when killed by signal N.")
    reason: Reason
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    queued_at: float
    started_at: float
    ended_at: float
    wall_s: float
    cpu_s: float = Field(description="User + system CPU of the process tree, seconds.")
    cores: tuple[int, ...] = ()
    isolation: Isolation = "none"

    @property
    def queued_s(self) -> float:
        return self.started_at - self.queued_at

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


# --------------------------------------------------------------------------- isolation


def _python_dirs() -> list[str]:
    """Directories of the running interpreter (and its venv) to show read-only."""
    dirs = {sys.base_prefix, sys.prefix, str(Path(os.path.realpath(sys.executable)).parent.parent)}
    return sorted(d for d in dirs if not d.startswith(("/usr/", "/etc/")) and d != "/usr")


def interpreter() -> str:
    """The Python that runs ``Command.code`` (stdlib only: the base installation)."""
    return os.path.realpath(sys.executable)


def _bwrap_prefix(workdir: str) -> list[str]:
    # --as-pid-1: the action is the namespace's init, so wait4 sees its (and its
    # reaped children's) CPU time; bwrap's own reaper would swallow it.
    argv = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--as-pid-1"]
    if os.geteuid() == 0:  # no user namespace: keep the right to drop to the sandbox uid
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user"]
    for d in _SYSTEM_DIRS + _ETC_FILES:
        argv += ["--ro-bind-try", d, d]
    for link in _ROOT_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        else:
            argv += ["--ro-bind-try", link, link]
    for d in _python_dirs():
        # Parents of a bind are created private (0700); the sandbox uid must traverse them.
        for parent in reversed(Path(d).parents[:-1]):
            argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", d, d]
    argv += ["--bind", workdir, INSIDE, "--chdir", INSIDE, "--proc", "/proc", "--dev", "/dev",
             "--tmpfs", "/tmp", "--setenv", "HOME", INSIDE, "--"]
    return argv


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@cache
def detect_isolation() -> Isolation:
    """The strongest isolation this machine supports, probed once; warns on a fallback."""
    if shutil.which("bwrap"):
        with tempfile.TemporaryDirectory() as d:
            if _works(_bwrap_prefix(d) + ["true"]):
                return "bwrap"
        log.warning("sandbox: bwrap is installed but cannot create a sandbox here; falling back")
    else:
        log.warning("sandbox: bwrap (bubblewrap) is not installed: actions get no private filesystem view; "
                    "install it (apt-get install -y bubblewrap) for full isolation")
    if shutil.which("unshare") and _works(_unshare_prefix() + ["true"]):
        log.warning("sandbox: falling back to `unshare -n` for network isolation")
        return "unshare"
    log.warning("sandbox: neither bwrap nor `unshare -n` works here: actions CAN reach the network")
    return "none"


def _unshare_prefix() -> list[str]:
    return ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]


# --------------------------------------------------------------------------- sandboxes


class Sandboxes:
    """The sandboxes of one node: open per trajectory, run actions, close.

    Parameters
    ----------
    root
        Directory under which sandbox directories are created; a fresh temporary
        directory when None.
    limits
        Default limits of every action (a command may override them).
    isolation
        ``"auto"`` (probe), or force ``"bwrap"``, ``"unshare"`` or ``"none"``.
    uid_base
        First uid handed to sandboxes when running as root (one uid per sandbox).
    """

    def __init__(self, root: str | Path | None = None, limits: Limits | None = None,
                 isolation: Isolation | Literal["auto"] = "auto", uid_base: int = 61000) -> None:
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="tangram-sandboxes-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.limits = limits or Limits()
        self.isolation: Isolation = detect_isolation() if isolation == "auto" else isolation
        self._uid_base = uid_base
        self._dirs: dict[str, Path] = {}
        self._uids: dict[str, int] = {}
        self._lock = threading.Lock()
        self._next_uid = 0
        self._running: dict[str, int] = {}  # run key -> process group
        self._killed: set[str] = set()

    def __contains__(self, sandbox_id: str) -> bool:
        return sandbox_id in self._dirs

    def ids(self) -> list[str]:
        return sorted(self._dirs)

    def path(self, sandbox_id: str) -> Path:
        return self._dirs[sandbox_id]

    def open(self, sandbox_id: Id) -> Path:
        """Create the sandbox directory (idempotent); returns its path."""
        with self._lock:
            if sandbox_id in self._dirs:
                return self._dirs[sandbox_id]
            path = Path(tempfile.mkdtemp(prefix=f"{_safe(sandbox_id)}-", dir=self.root))
            if self._drops_privileges():
                uid = self._uid_base + self._next_uid % 4096
                self._next_uid += 1
                os.chown(path, uid, uid)
                self._uids[sandbox_id] = uid
            path.chmod(0o700)
            self._dirs[sandbox_id] = path
            return path

    def close(self, sandbox_id: str) -> bool:
        """Remove the sandbox and its files; False when it was not open."""
        with self._lock:
            path = self._dirs.pop(sandbox_id, None)
            self._uids.pop(sandbox_id, None)
        if path is None:
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True

    def close_all(self) -> None:
        for sid in self.ids():
            self.close(sid)

    def _drops_privileges(self) -> bool:
        # Outside bwrap the sandbox uid could not reach an interpreter under a private home.
        return os.geteuid() == 0 and self.isolation == "bwrap" and shutil.which("setpriv") is not None

    # ------------------------------------------------------------------ run

    def run(self, sandbox_id: Id, command: Command, cores: Sequence[int], queued_at: float | None = None,
            key: str | None = None) -> RunResult:
        """Run one action in the sandbox (opened on demand) pinned to ``cores``.

        Blocks until the action ends or is killed; never raises for the action's
        own failures (they are the result's ``reason``). ``key`` names the run for
        :meth:`kill`.
        """
        if not cores:
            raise ValueError("cores: an action runs on at least one granted core")
        queued_at = time.time() if queued_at is None else queued_at
        workdir = self.open(sandbox_id)
        limits = command.limits or self.limits
        for rel, text in command.files.items():
            target = _inside(workdir, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            self._own(sandbox_id, target)
        argv = list(command.argv)
        script = None
        if command.code is not None:  # one file per run: actions of a trajectory may run at once
            script = workdir / f"_run_{uuid.uuid4().hex}.py"
            script.write_text(command.code)
            self._own(sandbox_id, script)
            argv = [interpreter(), script.name, *argv]
        if not argv:
            raise ValueError("command: give argv or code")
        try:
            return self._spawn(sandbox_id, workdir, argv, command, limits, tuple(sorted(cores)), queued_at, key)
        finally:
            if script is not None:
                script.unlink(missing_ok=True)

    def kill(self, key: str) -> bool:
        """Kill a running action's process group; it then ends as ``killed``. False if not running."""
        with self._lock:
            pgid = self._running.get(key)
            if pgid is None:
                return False
            self._killed.add(key)
        _kill_group(pgid)
        return True

    def _own(self, sandbox_id: str, path: Path) -> None:
        uid = self._uids.get(sandbox_id)
        if uid is not None:
            os.chown(path, uid, uid)

    def _argv(self, sandbox_id: str, workdir: Path, argv: list[str]) -> list[str]:
        prefix: list[str] = []
        if self.isolation == "bwrap":
            prefix = _bwrap_prefix(str(workdir))
        elif self.isolation == "unshare":
            prefix = _unshare_prefix()
        uid = self._uids.get(sandbox_id)
        if uid is not None:
            prefix += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]
        return prefix + argv

    def _spawn(self, sandbox_id: str, workdir: Path, argv: list[str], command: Command, limits: Limits,
               cores: tuple[int, ...], queued_at: float, key: str | None) -> RunResult:
        home = INSIDE if self.isolation == "bwrap" else str(workdir)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **command.env}
        started = time.time()
        proc = subprocess.Popen(
            self._argv(sandbox_id, workdir, argv), cwd=workdir, env=env, start_new_session=True,
            stdin=subprocess.PIPE if command.stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_preexec(cores, limits),
        )
        key = key if key is not None else f"pid:{proc.pid}"
        with self._lock:
            self._running[key] = proc.pid
        out, err = _Drain(proc.stdout, limits.output_bytes), _Drain(proc.stderr, limits.output_bytes)
        if command.stdin:
            threading.Thread(target=_feed, args=(proc.stdin, command.stdin.encode()), daemon=True).start()
        timed_out = threading.Event()
        timer = threading.Timer(limits.timeout_s, _kill_group, args=(proc.pid, timed_out))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        ended = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
        _kill_group(proc.pid)  # leftovers of the action (background children) die with it
        with self._lock:
            del self._running[key]
            killed = key in self._killed
            self._killed.discard(key)
        out.join()
        err.join()
        code = proc.returncode
        if self.isolation == "bwrap" and 128 < code < 128 + signal.NSIG:
            code = 128 - code  # bwrap reports a signalled child as 128 + N
        cpu_s = usage.ru_utime + usage.ru_stime
        cpu_out = limits.cpu_s is not None and cpu_s >= limits.cpu_s
        return RunResult(
            exit_code=code, reason="killed" if killed else _reason(code, timed_out.is_set() or cpu_out, err.text),
            stdout=out.text, stderr=err.text, stdout_truncated=out.truncated, stderr_truncated=err.truncated,
            queued_at=queued_at, started_at=started, ended_at=ended, wall_s=ended - started,
            cpu_s=cpu_s, cores=cores, isolation=self.isolation,
        )


def _reason(code: int, timed_out: bool, stderr: str) -> Reason:
    """Why an action ended, from its exit status, whether it ran out of wall or CPU
    time, and its stderr."""
    if timed_out or code == -signal.SIGXCPU:
        return "timeout"
    if code == 0:
        return "ok"
    if any(m in stderr for m in _MEMORY_MARKERS):
        return "memory"
    return "killed" if code < 0 else "nonzero_exit"


def _preexec(cores: tuple[int, ...], limits: Limits):
    """The child's setup between fork and exec: pin cores, set limits (async-signal-light)."""
    mib = 1024 * 1024
    rlimits = [(resource.RLIMIT_CORE, 0)]
    if limits.memory_mb is not None:
        rlimits.append((resource.RLIMIT_AS, limits.memory_mb * mib))
    if limits.cpu_s is not None:
        rlimits.append((resource.RLIMIT_CPU, limits.cpu_s))
    if limits.processes is not None:
        rlimits.append((resource.RLIMIT_NPROC, limits.processes))
    if limits.file_size_mb is not None:
        rlimits.append((resource.RLIMIT_FSIZE, limits.file_size_mb * mib))

    def setup() -> None:
        os.sched_setaffinity(0, cores)
        for kind, value in rlimits:
            hard = value + 1 if kind == resource.RLIMIT_CPU else value  # SIGXCPU first, SIGKILL a second later
            resource.setrlimit(kind, (value, hard))

    return setup


def _kill_group(pid: int, flag: threading.Event | None = None) -> None:
    if flag is not None:
        flag.set()
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:  # the action exited without reading its input
        pass


class _Drain:
    """Reads a pipe to its end in a thread, keeping the first ``limit`` bytes."""

    def __init__(self, pipe, limit: int) -> None:
        self._pipe, self._limit = pipe, limit
        self._chunks: list[bytes] = []
        self._kept = 0
        self.truncated = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with self._pipe:
            while chunk := self._pipe.read1(65536):
                room = self._limit - self._kept
                if len(chunk) > room:
                    self.truncated = True
                    chunk = chunk[:max(room, 0)]
                if chunk:
                    self._chunks.append(chunk)
                    self._kept += len(chunk)

    def join(self, timeout_s: float = 5.0) -> None:
        self._thread.join(timeout_s)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]


def _inside(workdir: Path, rel: str) -> Path:
    """``workdir / rel``, refusing paths that escape the sandbox."""
    target = (workdir / rel).resolve()
    if not target.is_relative_to(workdir.resolve()):
        raise ValueError(f"files: path {rel!r} leaves the sandbox")
    return target
