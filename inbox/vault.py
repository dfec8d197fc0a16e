"""The filesystem vault the jobs mutate: SAVE writes, DELETE compares and deletes, and
reconciliation only looks.

Owns every filesystem access under ``settings.VAULT_ROOT``: the atomic SAVE, the
compare-and-delete and the read-only ``probe`` used by reconciliation. Callers:
``inbox.handlers`` (save, delete) and ``inbox.reconcile`` (probe); nothing else touches the
vault directory.

Safety: a path is checked as text (``jobtypes.check_vault_path``), resolved through any symlinks
and refused unless it lands strictly inside the real root. The resolved path is then walked one
component at a time from the root's descriptor with ``O_NOFOLLOW``, so a symlink swapped in
after the check is refused rather than followed: nothing outside the root is ever read, written
or removed.

Nothing here waits without a bound, and objects are regular files only. An object is looked
at (``lstat``) before it is opened, and opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked
again with ``fstat``: a FIFO, a device, a socket or a directory at an object's path is refused
(``NOT_A_FILE``, a definite failure) without ever blocking in ``open()`` — an ``open()`` of a
FIFO with no writer would otherwise wait for one forever while the heartbeat kept the lease
alive. The per-path lock is taken with a deadline (``LOCK_WAIT_SECONDS``). ``probe`` turns any
``OSError`` into ``EvidenceUnavailable`` (a refusal for that one job, never a crash of the
caller), and ``delete`` turns an ``OSError`` before its unlink into a definite failure.

Every compare-and-delete attempt appends one fsynced line to the operation log
(``<root>/.vault/ops.log``); an unlink is logged *before* it happens, so the log can over-count
an interrupted unlink but never miss a real one. Tests use it as the ground truth for "no DELETE
ran twice". The top-level ``.vault`` directory is reserved for the log and the lock files.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from inbox.errors import InboxError
from inbox.jobtypes import check_vault_path

RESERVED_DIR = ".vault"
OPLOG_NAME = "ops.log"
TEMP_PREFIX = ".tmp-"
_LOCK_BUCKETS = 16
_CHUNK = 1 << 16
# The longest wait for the per-path lock (another process saving or deleting the same bucket).
LOCK_WAIT_SECONDS = 30.0
# Opening an object or a reserved file never blocks (a FIFO) and never follows a link.
_OPEN_OBJECT = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


class VaultError(InboxError):
    """A vault operation was refused or found a definite precondition failure."""

    def __init__(self, result_code: str, message: str, **detail: Any) -> None:
        self.result_code = result_code
        self.detail = detail
        super().__init__(message)


class VaultPathRefused(VaultError):
    """The path is malformed or resolves outside the vault root; nothing was touched."""

    def __init__(self, vault_path: str, why: str) -> None:
        super().__init__(
            "PATH_REFUSED", f"vault path {vault_path!r} refused: {why}", vault_path=vault_path
        )


class EvidenceUnavailable(VaultError):
    """The filesystem failed while probing (permission, name too long, I/O): no evidence now.

    Only this one job's probe failed; callers report it and go on with the others.
    """

    def __init__(self, vault_path: str, exc: OSError) -> None:
        why = exc.strerror or type(exc).__name__
        super().__init__(
            "EVIDENCE_UNAVAILABLE",
            f"evidence unavailable for {vault_path!r}: {why}",
            vault_path=vault_path,
            errno=exc.errno,
        )


def _not_a_file(vault_path: str, mode: int) -> VaultError:
    return VaultError(
        "NOT_A_FILE",
        f"{vault_path!r} is not a regular file (it is a {_kind(mode)}); refused",
        vault_path=vault_path,
    )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return name
    return "special file"


class _Recorded:
    """An outcome whose fields are what EXECUTED records, one key each."""

    def as_detail(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SaveOutcome(_Recorded):
    result_code: str  # WRITTEN or UNCHANGED
    vault_path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class DeleteOutcome(_Recorded):
    result_code: str  # DELETED
    vault_path: str
    sha256: str


@dataclass(frozen=True)
class Probe:
    vault_path: str
    present: bool
    current_hash: str | None


def vault_root() -> Path:
    """The vault root as configured (created on first use)."""
    root = Path(settings.VAULT_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    return root


def oplog_path() -> Path:
    return vault_root() / RESERVED_DIR / OPLOG_NAME


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- path resolution --------------------------------------------------------------------------


def resolve(vault_path: str) -> tuple[list[str], str]:
    """Return (directory parts, file name) of ``vault_path`` relative to the real root.

    Raises ``VaultPathRefused`` for anything malformed, reserved, or resolving (through
    symlinks) anywhere but strictly inside the root.
    """
    problems = check_vault_path(vault_path) if isinstance(vault_path, str) else ["not text"]
    if problems:
        raise VaultPathRefused(str(vault_path), "; ".join(problems))
    if vault_path.split("/")[0] == RESERVED_DIR:
        raise VaultPathRefused(vault_path, f"{RESERVED_DIR}/ is reserved for the vault itself")
    root = os.path.realpath(vault_root())
    full = os.path.realpath(os.path.join(root, vault_path))
    if not full.startswith(root + os.sep):
        raise VaultPathRefused(vault_path, "it resolves outside the vault root")
    parts = os.path.relpath(full, root).split(os.sep)
    if parts[0] == RESERVED_DIR:
        raise VaultPathRefused(vault_path, f"it resolves into the reserved {RESERVED_DIR}/")
    if parts[-1].startswith(TEMP_PREFIX):
        raise VaultPathRefused(vault_path, f"names starting {TEMP_PREFIX!r} are the vault's")
    return parts[:-1], parts[-1]


def _open_root() -> int:
    return os.open(os.path.realpath(vault_root()), os.O_RDONLY | os.O_DIRECTORY)


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK


def _open_dir(parts: list[str], *, create: bool, vault_path: str) -> int:
    """Open the directory ``parts`` below the root without following any symlink.

    Raises FileNotFoundError when a directory is missing and ``create`` is false.
    """
    fd = _open_root()
    try:
        for part in parts:
            try:
                child = os.open(part, _OPEN_DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    os.fsync(fd)  # the new directory entry must survive a crash too
                except FileExistsError:
                    pass  # another writer made it first
                child = os.open(part, _OPEN_DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise VaultPathRefused(
                        vault_path, f"{part!r} is a symlink or not a directory"
                    ) from exc
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _hash_at(dir_fd: int, name: str, *, vault_path: str) -> str | None:
    """sha256 of the regular file ``name`` in ``dir_fd``; None when absent.

    Anything but a regular file is refused before it is opened (``lstat``), and checked again
    after the non-blocking open (``fstat``) in case it was swapped in between.
    """
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        raise VaultPathRefused(vault_path, "the object is a symlink")
    if not stat.S_ISREG(mode):
        raise _not_a_file(vault_path, mode)
    try:
        fd = os.open(name, _OPEN_OBJECT, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise VaultPathRefused(vault_path, "the object is a symlink") from exc
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
            # A socket or device swapped in after the lstat.
            raise _not_a_file(vault_path, stat.S_IFSOCK) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_a_file(vault_path, mode)
        digest = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _open_reserved(path: Path, flags: int) -> int:
    """Open one of the vault's own files (a lock, the log): no link, no FIFO, no wait."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        # ENXIO: a FIFO without a reader (write side) or a socket; ELOOP: a symlink.
        if exc.errno not in (errno.ENXIO, errno.ELOOP, errno.ENODEV):
            raise
        raise VaultError("NOT_A_FILE", f"{path} must be a regular file") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise VaultError("NOT_A_FILE", f"{path} must be a regular file")
    return fd


@contextmanager
def _locked(parts: list[str], name: str, *, vault_path: str = "") -> Iterator[None]:
    """Serialise compare-and-delete against a concurrent SAVE of the same path (any process).

    The wait is bounded: a holder frozen for ``LOCK_WAIT_SECONDS`` makes this call fail with
    ``VAULT_BUSY`` (nothing touched) instead of waiting for it forever.
    """
    key = "/".join([*parts, name]).encode("utf-8")
    bucket = zlib.crc32(key) % _LOCK_BUCKETS
    lock_fd = _open_reserved(_reserved_dir() / f"lock-{bucket:02d}", os.O_RDWR)
    try:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise VaultError(
                        "VAULT_BUSY",
                        f"{vault_path or '/'.join([*parts, name])!r}: another process held the "
                        f"vault lock for {LOCK_WAIT_SECONDS:.0f} s; nothing was touched",
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(lock_fd)  # closing releases the lock


def _reserved_dir() -> Path:
    path = vault_root() / RESERVED_DIR
    if path.is_symlink():
        raise VaultError("PATH_REFUSED", f"{path} must be a directory, not a symlink")
    path.mkdir(exist_ok=True)
    return path


def _log_op(**fields: Any) -> None:
    """Append one fsynced line to the operation log."""
    line = json.dumps(
        {"at": dt.datetime.now(dt.UTC).isoformat(), "pid": os.getpid(), **fields},
        sort_keys=True,
    )
    fd = _open_reserved(_reserved_dir() / OPLOG_NAME, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_oplog() -> list[dict[str, Any]]:
    """Every operation-log line, oldest first (for tests and diagnostics)."""
    path = oplog_path()
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# --- operations -------------------------------------------------------------------------------


def save(vault_path: str, *, content: str, provenance_hash: str) -> SaveOutcome:
    """Write ``content`` at ``vault_path`` atomically; identical content already there is a no-op.

    The bytes go to a temp file in the same directory, are fsynced, renamed over the target and
    the directory is fsynced: a reader (or a crash) sees the old object or the new, never half.
    """
    data = content.encode("utf-8")
    actual = sha256_bytes(data)
    if actual != provenance_hash:
        raise VaultError(
            "HASH_MISMATCH",
            f"sha256 of the content is {actual}, not the provenance_hash {provenance_hash}",
            vault_path=vault_path,
        )
    parts, name = resolve(vault_path)
    dir_fd = _open_dir(parts, create=True, vault_path=vault_path)
    try:
        if _hash_at(dir_fd, name, vault_path=vault_path) == actual:
            return SaveOutcome("UNCHANGED", vault_path, actual, len(data))
        tmp = f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.close(fd)
        try:
            with _locked(parts, name, vault_path=vault_path):
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
        return SaveOutcome("WRITTEN", vault_path, actual, len(data))
    finally:
        os.close(dir_fd)


def delete(vault_path: str, *, expected_hash: str, tag: str = "") -> DeleteOutcome:
    """Remove the object only if its current sha256 equals ``expected_hash``.

    A missing object raises ``VaultError("NOT_FOUND")``, a different hash
    ``VaultError("HASH_MISMATCH")``, anything but a regular file ``VaultError("NOT_A_FILE")`` and
    a filesystem error before the unlink ``VaultError("IO_ERROR")``: all are definite — nothing
    was removed. Only an error from the unlink itself or after it propagates as an ``OSError``
    (the outcome is unknown). ``tag`` (the job and claim) goes into the operation log.
    """
    parts, name = resolve(vault_path)
    try:
        dir_fd = _open_dir(parts, create=False, vault_path=vault_path)
    except FileNotFoundError:
        _log_op(op="delete", outcome="not_found", path=vault_path, tag=tag)
        raise VaultError("NOT_FOUND", f"{vault_path!r} is not in the vault") from None
    except OSError as exc:
        raise _io_error(vault_path, exc) from exc
    try:
        with _locked(parts, name, vault_path=vault_path):
            try:
                current = _checked_for_delete(dir_fd, name, vault_path, expected_hash, tag)
                # Logged before acting: the log may show an unlink a crash interrupted, never
                # miss one.
                _log_op(op="delete", outcome="unlink", path=vault_path, hash=current, tag=tag)
            except OSError as exc:
                raise _io_error(vault_path, exc) from exc
            os.unlink(name, dir_fd=dir_fd)
        os.fsync(dir_fd)
        return DeleteOutcome("DELETED", vault_path, current)
    finally:
        os.close(dir_fd)


def _checked_for_delete(
    dir_fd: int, name: str, vault_path: str, expected_hash: str, tag: str
) -> str:
    """The object's current hash if it may be removed; else a definite ``VaultError``."""
    current = _hash_at(dir_fd, name, vault_path=vault_path)
    if current is None:
        _log_op(op="delete", outcome="not_found", path=vault_path, tag=tag)
        raise VaultError("NOT_FOUND", f"{vault_path!r} is not in the vault")
    if current != expected_hash:
        _log_op(
            op="delete",
            outcome="hash_mismatch",
            path=vault_path,
            hash=current,
            expected=expected_hash,
            tag=tag,
        )
        raise VaultError(
            "HASH_MISMATCH",
            f"{vault_path!r} has sha256 {current}, not the expected {expected_hash}",
            current_hash=current,
            expected_hash=expected_hash,
        )
    return current


def _io_error(vault_path: str, exc: OSError) -> VaultError:
    return VaultError(
        "IO_ERROR",
        f"{vault_path!r}: {exc.strerror or exc} before anything was removed",
        vault_path=vault_path,
        errno=exc.errno,
    )


def probe(vault_path: str) -> Probe:
    """Is the object there, and what is its sha256? Read-only: creates nothing, never blocks.

    A malformed path or anything but a regular file is a ``VaultError``; any filesystem error
    is ``EvidenceUnavailable`` (a ``VaultError`` too), so the caller can report this one job
    and go on with the others.
    """
    try:
        parts, name = resolve(vault_path)
        try:
            dir_fd = _open_dir(parts, create=False, vault_path=vault_path)
        except FileNotFoundError:
            return Probe(vault_path, False, None)
        try:
            current = _hash_at(dir_fd, name, vault_path=vault_path)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise EvidenceUnavailable(vault_path, exc) from exc
    return Probe(vault_path, current is not None, current)
