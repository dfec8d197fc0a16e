"""Hostile things at an object's path: the vault refuses anything that is not a
regular file without blocking, bounds its lock wait, and turns filesystem errors into definite
failures (delete, before its unlink) or "evidence unavailable" (probe), never a hang or a crash.

Every call that could block runs under ``bounded``: a regression fails the test after a few
seconds instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from inbox import vault
from inbox.handlers import DefiniteFailure, delete_object, save_object
from inbox.jobtypes import MAX_VAULT_COMPONENT_BYTES, check_vault_path
from tests.executors.support import sha

# A call that has not returned after this long is taken as blocked.
BLOCKED_AFTER = 5.0


@pytest.fixture
def root(settings, tmp_path) -> Path:
    settings.VAULT_ROOT = tmp_path / "vault"
    (tmp_path / "vault").mkdir()
    return tmp_path / "vault"


def bounded(fn: Callable[[], Any], seconds: float = BLOCKED_AFTER) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging) if it is still running after ``seconds``.

    Returns its result or re-raises its exception.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _unblock_fifos()
        raise AssertionError(f"the vault call was still blocked after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box.get("result")


_FIFOS: list[Path] = []


def _unblock_fifos() -> None:
    """Open every FIFO a test made for writing, so a thread blocked reading one can finish."""
    for path in _FIFOS:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def make_special(path: Path, kind: str) -> None:
    """A FIFO, a directory, a UNIX socket or a character device (a copy of /dev/null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
        _FIFOS.append(path)
    elif kind == "directory":
        path.mkdir()
        (path / "inside.md").write_text("x")
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "device":
        null = os.stat("/dev/null")
        os.mknod(path, stat.S_IFCHR | 0o644, null.st_rdev)
    else:
        raise ValueError(kind)


SPECIAL_KINDS = ["fifo", "directory", "socket", "device"]


def _save_job(path: str) -> SimpleNamespace:
    return SimpleNamespace(
        job_id="s1",
        claim_id="c1",
        vault_path=path,
        payload={"content": "x", "provenance_hash": sha("x")},
    )


def _delete_job(path: str) -> SimpleNamespace:
    return SimpleNamespace(
        job_id="d1", claim_id="c2", vault_path=path, payload={"expected_provenance_hash": sha("x")}
    )


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_save_over_special_file_fails_definitely_without_blocking(root, kind):
    make_special(root / "notes" / "odd.md", kind)
    with pytest.raises(DefiniteFailure) as failed:
        bounded(lambda: save_object(_save_job("notes/odd.md")))
    assert failed.value.result_code == "NOT_A_FILE"
    assert "not a regular file" in str(failed.value)
    assert not list(root.rglob(".tmp-*"))


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_delete_of_special_file_fails_definitely_and_removes_nothing(root, kind):
    target = root / "notes" / "odd.md"
    make_special(target, kind)
    with pytest.raises(DefiniteFailure) as failed:
        bounded(lambda: delete_object(_delete_job("notes/odd.md")))
    assert failed.value.result_code == "NOT_A_FILE"
    assert os.path.lexists(target)
    assert not [e for e in vault.read_oplog() if e["outcome"] == "unlink"]


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_probe_of_special_file_is_refused_without_blocking(root, kind):
    make_special(root / "odd.md", kind)
    with pytest.raises(vault.VaultError) as refused:
        bounded(lambda: vault.probe("odd.md"))
    assert refused.value.result_code == "NOT_A_FILE"


def test_fifo_swapped_in_after_the_lstat_is_refused_by_fstat(root, monkeypatch):
    """The non-blocking open plus fstat is the second guard: a FIFO that appears between the
    lstat and the open is still refused, and the open does not wait for a writer."""
    (root / "a.md").write_text("x")
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if path == "a.md":
            (root / "a.md").unlink()
            make_special(root / "a.md", "fifo")
        return result

    monkeypatch.setattr(vault.os, "stat", stat_then_swap)
    with pytest.raises(vault.VaultError) as refused:
        bounded(lambda: vault.probe("a.md"))
    assert refused.value.result_code == "NOT_A_FILE"


def test_fifo_in_place_of_a_directory_is_refused_without_blocking(root):
    make_special(root / "notes", "fifo")
    with pytest.raises(vault.VaultPathRefused):
        bounded(lambda: vault.probe("notes/a.md"))
    with pytest.raises(vault.VaultPathRefused):
        bounded(lambda: vault.save("notes/a.md", content="x", provenance_hash=sha("x")))


def test_fifo_as_the_operation_log_is_refused_without_blocking(root):
    """The vault's own files get the same treatment: a FIFO planted as the log cannot stall a
    delete (an O_WRONLY open of a FIFO without a reader would wait for one)."""
    (root / "a.md").write_text("x")
    make_special(root / ".vault" / "ops.log", "fifo")
    with pytest.raises(DefiniteFailure) as failed:
        bounded(lambda: delete_object(_delete_job("a.md")))
    assert failed.value.result_code == "NOT_A_FILE"
    assert (root / "a.md").read_text() == "x"


def test_lock_held_by_another_process_is_given_up_after_the_bound(root, monkeypatch):
    """A holder frozen with the per-path lock makes a delete fail definitely, not wait forever."""
    monkeypatch.setattr(vault, "LOCK_WAIT_SECONDS", 0.3)
    (root / "a.md").write_text("x")
    parts, name = vault.resolve("a.md")
    # flock belongs to an open file description: this holder conflicts with the delete's own.
    with vault._locked(parts, name), pytest.raises(DefiniteFailure) as failed:
        bounded(lambda: delete_object(_delete_job("a.md")))
    assert failed.value.result_code == "VAULT_BUSY"
    assert (root / "a.md").read_text() == "x"


def test_delete_with_filesystem_error_before_unlink_is_definite(root, monkeypatch):
    """EACCES (or any OSError) while opening the object: nothing was removed, so FAILED — not
    OUTCOME_UNKNOWN, which would need a reconciliation nobody can do."""
    (root / "a.md").write_text("x")
    real_open = os.open

    def deny(path, flags, *args, **kwargs):
        if path == "a.md":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault.os, "open", deny)
    with pytest.raises(DefiniteFailure) as failed:
        delete_object(_delete_job("a.md"))
    assert failed.value.result_code == "IO_ERROR"
    assert "Permission denied" in str(failed.value)
    assert (root / "a.md").read_text() == "x"


def test_delete_with_error_from_the_unlink_itself_stays_unknown(root, monkeypatch):
    """The one place the outcome is not known: the unlink. It propagates (OUTCOME_UNKNOWN)."""
    (root / "a.md").write_text("x")

    def broken_unlink(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(vault.os, "unlink", broken_unlink)
    with pytest.raises(OSError) as raised:
        delete_object(_delete_job("a.md"))
    assert not isinstance(raised.value, DefiniteFailure)
    assert raised.value.errno == errno.EIO


def test_probe_with_filesystem_error_is_evidence_unavailable(root, monkeypatch):
    real_open = os.open

    def deny(path, flags, *args, **kwargs):
        if path == "locked":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    (root / "locked").mkdir()
    monkeypatch.setattr(vault.os, "open", deny)
    with pytest.raises(vault.EvidenceUnavailable) as unavailable:
        vault.probe("locked/a.md")
    assert unavailable.value.result_code == "EVIDENCE_UNAVAILABLE"
    assert "evidence unavailable" in str(unavailable.value)
    assert "Permission denied" in str(unavailable.value)


def test_probe_with_vault_root_unreachable_is_evidence_unavailable(settings, tmp_path):
    """A real filesystem error, no mock: the root's path is longer than the kernel takes."""
    deep = tmp_path
    while len(str(deep)) < 4200:
        deep = deep / ("d" * 200)
    settings.VAULT_ROOT = deep
    with pytest.raises(vault.EvidenceUnavailable) as unavailable:
        vault.probe("a.md")
    assert unavailable.value.detail["errno"] == errno.ENAMETOOLONG


# --- the text check ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("component", "ok"),
    [
        ("a" * MAX_VAULT_COMPONENT_BYTES, True),
        ("a" * (MAX_VAULT_COMPONENT_BYTES + 1), False),
        ("é" * 127, True),  # 254 bytes
        ("é" * 128, False),  # 256 bytes, 128 characters
        ("😀" * 64, False),  # 256 bytes, 64 characters
    ],
)
def test_check_vault_path_component_over_255_utf8_bytes_is_refused(component, ok):
    problems = check_vault_path(f"notes/{component}/x.md")
    assert (problems == []) is ok
    if not ok:
        assert any("at most 255" in p for p in problems)


def test_vault_refuses_long_component_before_touching_the_filesystem(root):
    path = "notes/" + "n" * 300 + ".md"
    with pytest.raises(vault.VaultPathRefused, match="at most 255"):
        vault.probe(path)
    with pytest.raises(vault.VaultPathRefused):
        vault.save(path, content="x", provenance_hash=sha("x"))
    assert not (root / "notes").exists()
