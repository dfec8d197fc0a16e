"""The vault: atomic save, compare-and-delete, probe, and refusal of anything outside the root."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from inbox import vault
from inbox.handlers import DefiniteFailure, delete_object, save_object
from tests.executors.support import sha

SENTINEL_TEXT = "outside the vault: must never change\n"


@pytest.fixture
def root(settings, tmp_path) -> Path:
    settings.VAULT_ROOT = tmp_path / "vault"
    (tmp_path / "vault").mkdir()
    return tmp_path / "vault"


@pytest.fixture
def sentinel(tmp_path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "sentinel.txt"
    path.write_text(SENTINEL_TEXT)
    return path


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_save_new_object_writes_bytes_and_leaves_no_temp_file(root):
    outcome = vault.save("notes/a.md", content="# A\n", provenance_hash=sha("# A\n"))
    assert outcome.result_code == "WRITTEN"
    assert (root / "notes" / "a.md").read_bytes() == b"# A\n"
    assert not list(root.rglob(".tmp-*"))


def test_save_identical_content_again_is_a_noop(root):
    vault.save("a.md", content="same", provenance_hash=sha("same"))
    before = os.stat(root / "a.md")
    outcome = vault.save("a.md", content="same", provenance_hash=sha("same"))
    after = os.stat(root / "a.md")
    assert outcome.result_code == "UNCHANGED"
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_save_new_content_replaces_object(root):
    vault.save("a.md", content="one", provenance_hash=sha("one"))
    assert vault.save("a.md", content="two", provenance_hash=sha("two")).result_code == "WRITTEN"
    assert (root / "a.md").read_text() == "two"


def test_save_with_wrong_provenance_hash_is_refused_and_writes_nothing(root):
    with pytest.raises(vault.VaultError) as err:
        vault.save("a.md", content="one", provenance_hash=sha("other"))
    assert err.value.result_code == "HASH_MISMATCH"
    assert _snapshot(root) == {}


def test_delete_with_matching_hash_removes_object_and_logs_it(root):
    (root / "a.md").write_text("x")
    outcome = vault.delete("a.md", expected_hash=sha("x"), tag="job-1 claim-1")
    assert outcome.result_code == "DELETED"
    assert not (root / "a.md").exists()
    assert [(e["outcome"], e["tag"]) for e in vault.read_oplog()] == [("unlink", "job-1 claim-1")]


def test_delete_with_other_hash_fails_definitely_and_keeps_object(root):
    (root / "a.md").write_text("changed")
    with pytest.raises(vault.VaultError) as err:
        vault.delete("a.md", expected_hash=sha("x"))
    assert err.value.result_code == "HASH_MISMATCH"
    assert (root / "a.md").read_text() == "changed"


@pytest.mark.parametrize("path", ["missing.md", "no/such/dir/missing.md"])
def test_delete_missing_object_fails_definitely_with_not_found(root, path):
    with pytest.raises(vault.VaultError) as err:
        vault.delete(path, expected_hash=sha("x"))
    assert err.value.result_code == "NOT_FOUND"


def test_probe_reports_presence_and_hash_without_creating_anything(root):
    (root / "a.md").write_text("x")
    assert vault.probe("a.md") == vault.Probe("a.md", True, sha("x"))
    assert vault.probe("new/dir/b.md") == vault.Probe("new/dir/b.md", False, None)
    assert not (root / "new").exists()


@pytest.mark.parametrize(
    "path",
    [
        "../outside/sentinel.txt",
        "notes/../../outside/sentinel.txt",
        "/etc/passwd",
        "SENTINEL_ABSOLUTE",
        ".vault/ops.log",
        "a\\b",
        "a\x00b",
        "./a.md",
    ],
)
def test_malformed_or_escaping_paths_are_refused_everywhere(root, sentinel, path):
    path = str(sentinel) if path == "SENTINEL_ABSOLUTE" else path
    with pytest.raises(vault.VaultPathRefused):
        vault.save(path, content="evil", provenance_hash=sha("evil"))
    with pytest.raises(vault.VaultPathRefused):
        vault.delete(path, expected_hash=sha(SENTINEL_TEXT))
    with pytest.raises(vault.VaultPathRefused):
        vault.probe(path)
    assert sentinel.read_text() == SENTINEL_TEXT
    assert _snapshot(sentinel.parent) == {"sentinel.txt": SENTINEL_TEXT.encode()}


def test_symlinked_directory_pointing_outside_is_refused(root, sentinel):
    (root / "link").symlink_to(sentinel.parent, target_is_directory=True)
    with pytest.raises(vault.VaultPathRefused):
        vault.delete("link/sentinel.txt", expected_hash=sha(SENTINEL_TEXT))
    with pytest.raises(vault.VaultPathRefused):
        vault.save("link/new.md", content="evil", provenance_hash=sha("evil"))
    with pytest.raises(vault.VaultPathRefused):
        vault.save("link/sentinel.txt", content="evil", provenance_hash=sha("evil"))
    with pytest.raises(vault.VaultPathRefused):
        vault.probe("link/sentinel.txt")
    assert _snapshot(sentinel.parent) == {"sentinel.txt": SENTINEL_TEXT.encode()}


def test_symlinked_object_pointing_outside_is_refused(root, sentinel):
    (root / "evil.md").symlink_to(sentinel)
    with pytest.raises(vault.VaultPathRefused):
        vault.delete("evil.md", expected_hash=sha(SENTINEL_TEXT))
    with pytest.raises(vault.VaultPathRefused):
        vault.save("evil.md", content="evil", provenance_hash=sha("evil"))
    assert (root / "evil.md").is_symlink()
    assert _snapshot(sentinel.parent) == {"sentinel.txt": SENTINEL_TEXT.encode()}


def test_symlink_inside_the_vault_resolving_inside_is_followed(root):
    (root / "real").mkdir()
    (root / "alias").symlink_to(root / "real", target_is_directory=True)
    vault.save("alias/a.md", content="in", provenance_hash=sha("in"))
    assert (root / "real" / "a.md").read_text() == "in"


def test_handlers_turn_refusals_into_definite_failures(root, sentinel):
    (root / "link").symlink_to(sentinel.parent, target_is_directory=True)
    save_job = SimpleNamespace(
        job_id="s1",
        claim_id="c1",
        vault_path="link/x.md",
        payload={"content": "evil", "provenance_hash": sha("evil")},
    )
    delete_job = SimpleNamespace(
        job_id="d1",
        claim_id="c2",
        vault_path="link/sentinel.txt",
        payload={"expected_provenance_hash": sha(SENTINEL_TEXT)},
    )
    with pytest.raises(DefiniteFailure) as saved:
        save_object(save_job)
    with pytest.raises(DefiniteFailure) as deleted:
        delete_object(delete_job)
    assert (saved.value.result_code, deleted.value.result_code) == ("PATH_REFUSED", "PATH_REFUSED")
    assert _snapshot(sentinel.parent) == {"sentinel.txt": SENTINEL_TEXT.encode()}
