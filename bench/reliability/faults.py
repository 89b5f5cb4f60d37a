"""The faults the trials inject: processes killed, a full disk (injected in
the package's file and SQL calls, or a real tmpfs filled up), damaged files
(flipped bytes, cut files, arrays overwritten and resealed, catalog rows
edited) and a lost SQLite log.

Each injection is one function or context manager; the kinds decide where
and when, and judge what happened.
"""
import builtins
import contextlib
import errno
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

from .indexes import copy_index, sha256_of

# A raw write() of the fault-injected file layer writes at most this much
# (a short write is legal), so that a segment write has several positions.
WRITE_CAP = 16 << 10


# ============================================================== kills
def sigkill_all(pids, pause, rng):
    """SIGKILL every process of ``pids``, at most ``pause`` seconds apart."""
    for n, pid in enumerate(pids):
        if n:
            time.sleep(rng.uniform(0, pause))
        os.kill(pid, signal.SIGKILL)


# ============================================================== damaged files
def flip_byte(path, offset, xor):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ xor]))


def write_bytes(path, offset, data):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def truncate(path, length):
    with open(path, "r+b") as handle:
        handle.truncate(length)


def find_all(data, needle):
    """Every offset of ``needle`` in ``data``."""
    out, at = [], data.find(needle)
    while at >= 0:
        out.append(at)
        at = data.find(needle, at + 1)
    return out


def overwrite_array(index_path, segment_name, dataset, at, value):
    """Set ``dataset[at]`` of a segment (``value`` None: to the value before
    it, a repeat) and reseal the catalog's checksum of the segment, so that
    only the content can tell."""
    import h5py

    segment = os.path.join(index_path, "segments", segment_name)
    with h5py.File(segment, "r+") as f:
        f[dataset][at] = f[dataset][at - 1] if value is None else value
    edit_catalog(index_path, "UPDATE segments SET checksum = ? WHERE file = ?",
                 (sha256_of(segment), segment_name))


def edit_catalog(index_path, sql, params=None):
    """Run ``sql`` on the catalog with plain sqlite3 (a script of several
    statements when ``params`` is None), and commit."""
    con = sqlite3.connect(os.path.join(index_path, "catalog.sqlite"))
    try:
        if params is None:
            con.executescript(sql)
        else:
            con.execute(sql, params)
        con.commit()
    finally:
        con.close()


# ============================================================== a lost log
def lose_wal(index_path):
    """Delete the catalog's log and shared memory, as a crash with a lost
    file would."""
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(index_path, "catalog.sqlite" + suffix))


def copy_without_wal(src, dst):
    """Copy an index directory as a careless backup does: without the log."""
    return copy_index(src, dst, without=("-wal", "-shm"))


# ============================================================== disk full, injected
class FaultPlan:
    """Counts the calls that can allocate space and fails the ``fail_at``-th
    (0-based) and, the disk being full from then on, every later one."""

    def __init__(self, fail_at=None):
        self.fail_at = fail_at
        self.calls = []
        self.fault = None

    def hit(self, label):
        position = len(self.calls)
        self.calls.append(label)
        if self.fault is not None or (self.fail_at is not None and position == self.fail_at):
            if self.fault is None:
                self.fault = f"call {position} ({label})"
            return True
        return False


def _enospc(what):
    return OSError(errno.ENOSPC, "No space left on device (injected)", what)


class _FaultyRaw(io.FileIO):
    """A file whose write() may fail with ENOSPC and otherwise writes at most
    WRITE_CAP bytes (a short write, which buffered files complete)."""

    def __init__(self, file, mode, plan):
        super().__init__(file, mode)
        self._plan = plan

    def write(self, data):
        if self._plan.hit(f"write {os.path.basename(str(self.name))}"):
            raise _enospc(self.name)
        return super().write(memoryview(data).cast("B")[:WRITE_CAP])


class _OsProxy:
    """``os`` for the storage module, with fsync and rename counted (and failed)."""

    def __init__(self, real, plan):
        self._real = real
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._real, name)

    def fsync(self, fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = str(fd)
        kind = "directory" if os.path.isdir(target) else os.path.basename(target)
        if self._plan.hit(f"fsync {kind}"):
            raise _enospc(target)
        return self._real.fsync(fd)

    def replace(self, src, dst):
        if self._plan.hit(f"rename {os.path.basename(str(src))}"):
            raise _enospc(src)
        return self._real.replace(src, dst)

    def rename(self, src, dst):
        if self._plan.hit(f"rename {os.path.basename(str(src))}"):
            raise _enospc(src)
        return self._real.rename(src, dst)


_MISSING = object()


@contextlib.contextmanager
def file_faults(plan):
    """Inject into the storage module's own file calls: creating a file,
    each raw write, fsync, rename (the names it looks up in its globals)."""
    from sobolev_index.index import storage

    assert hasattr(storage, "os"), "storage no longer uses os: the injection must follow it"

    def faulty_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            if plan.hit(f"create {os.path.basename(str(file))}"):
                raise _enospc(file)
            if "b" in mode and "+" not in mode:
                return io.BufferedWriter(_FaultyRaw(file, mode.replace("b", ""), plan))
        return builtins.open(file, mode, *args, **kwargs)

    saved_open = storage.__dict__.get("open", _MISSING)
    saved_os = storage.os
    storage.open = faulty_open
    storage.os = _OsProxy(saved_os, plan)
    try:
        yield
    finally:
        storage.os = saved_os
        if saved_open is _MISSING:
            del storage.open
        else:
            storage.open = saved_open


class _FailingConnection:
    """The catalog's sqlite3 connection, whose writing statements may fail
    as SQLite fails on a full disk (SQLITE_FULL)."""

    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "COMMIT")

    def __init__(self, real, plan):
        self._real = real
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _check(self, sql):
        words = " ".join(sql.split()[:3])
        if words.upper().startswith(self.WRITES) and self._plan.hit(words):
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = sqlite3.SQLITE_FULL
            exc.sqlite_errorname = "SQLITE_FULL"
            raise exc

    def execute(self, sql, params=()):
        self._check(sql)
        return self._real.execute(sql, params)

    def executemany(self, sql, rows):
        self._check(sql)
        return self._real.executemany(sql, rows)


@contextlib.contextmanager
def sql_faults(index, plan):
    """Inject SQLITE_FULL into the writing statements of ``index``'s catalog."""
    catalog = index._catalog
    real = catalog.conn
    catalog.conn = _FailingConnection(real, plan)
    try:
        yield
    finally:
        catalog.conn = real


@contextlib.contextmanager
def free_space_faults(free):
    """The storage module sees a file system with ``free`` bytes free."""
    from sobolev_index.index import storage

    real = storage.shutil.disk_usage
    storage.shutil.disk_usage = lambda path: real(path)._replace(free=free)
    try:
        yield
    finally:
        storage.shutil.disk_usage = real


# ============================================================== disk full, for real
def can_mount_tmpfs():
    """Why a tmpfs cannot be mounted here (None if it can: root on Linux)."""
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        return "needs root on Linux to mount a tmpfs; this run was not root"
    return None


@contextlib.contextmanager
def tmpfs(mount, size="32M"):
    """A tmpfs of ``size`` mounted at ``mount`` (yields None), or the reason
    it could not be (yields the message)."""
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount],
                          capture_output=True, text=True)
    if done.returncode != 0:
        yield f"mounting a tmpfs failed: {done.stderr.strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", mount], capture_output=True)


def fill_to(mount, free, filler):
    """Leave ``free`` bytes free on the file system of ``mount``."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(filler)
    stats = os.statvfs(mount)
    available = stats.f_bavail * stats.f_frsize
    size = available - free
    if size > 0:
        fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    stats = os.statvfs(mount)
    return stats.f_bavail * stats.f_frsize
