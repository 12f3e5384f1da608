"""Incident bundles from other teams: a hostile archive is refused before anything is written, or contained."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import LogWriter


def hf(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


@pytest.fixture()
def log_bytes() -> bytes:
    w = LogWriter(tp=2).startup().traffic(10, 60).posts(62, 400)
    return ("\n".join(w.lines) + "\n").encode()


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def refused(p: subprocess.CompletedProcess, word: str) -> None:
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert word in p.stderr, p.stderr


def test_a_well_formed_bundle_is_reported(tmp_path: Path, log_bytes: bytes):
    tgz = _tar(tmp_path / "incident.tar.gz", [_file("node7/server.log", log_bytes)])
    p = hf("report", str(tgz), "-o", str(tmp_path / "r.html"), "--json", str(tmp_path / "f.json"))
    assert p.returncode == 0, p.stderr
    assert '"engine": "node7"' in (tmp_path / "f.json").read_text()


@pytest.mark.parametrize("name", ["../escaped.log", "node7/../../escaped.log", "/tmp/hf-absolute-escape.log"])
def test_tar_members_that_escape_are_refused(tmp_path: Path, log_bytes: bytes, name: str):
    tgz = _tar(tmp_path / "evil.tar.gz", [_file("node7/server.log", log_bytes), _file(name, b"pwned\n")])
    refused(hf("report", str(tgz), "-o", str(tmp_path / "r.html")), "unsafe")
    assert not (tmp_path / "escaped.log").exists() and not Path("/tmp/hf-absolute-escape.log").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_tar_links_pointing_outside_are_refused(tmp_path: Path, log_bytes: bytes, kind: bytes):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me\n")
    tgz = _tar(tmp_path / "links.tar.gz", [_file("node7/server.log", log_bytes),
                                          _link("node7/notes.log", str(secret), kind)])
    refused(hf("report", str(tgz), "-o", str(tmp_path / "r.html")), "unsafe")


@pytest.mark.parametrize("name", ["../escaped.log", "/tmp/hf-zip-absolute.log"])
def test_zip_members_that_escape_are_refused(tmp_path: Path, log_bytes: bytes, name: str):
    zp = tmp_path / "evil.zip"
    with zipfile.ZipFile(zp, "w") as z:
        z.writestr("node7/server.log", log_bytes)
        z.writestr(zipfile.ZipInfo(name), b"pwned\n")
    refused(hf("report", str(zp), "-o", str(tmp_path / "r.html")), "escapes")
    assert not (tmp_path / "escaped.log").exists() and not Path("/tmp/hf-zip-absolute.log").exists()


def test_a_zip_symlink_is_contained_as_a_plain_file(tmp_path: Path, log_bytes: bytes):
    """zipfile ignores the symlink bit: the member lands as a small file holding the link's target text."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret\n")
    zp = tmp_path / "link.zip"
    with zipfile.ZipFile(zp, "w") as z:
        z.writestr("node7/server.log", log_bytes)
        info = zipfile.ZipInfo("node7/notes.log")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, str(secret))
    db = tmp_path / "h.duckdb"
    p = hf("report", str(zp), "-o", str(tmp_path / "r.html"), "--db", str(db))
    assert p.returncode == 0, p.stderr
    q = hf("sql", "SELECT text FROM unparsed WHERE path = 'notes.log'", "--db", str(db), "--format", "csv")
    assert str(secret) in q.stdout and "the secret" not in q.stdout


def test_a_zip_bomb_is_refused_before_it_is_written(tmp_path: Path, log_bytes: bytes):
    zp = tmp_path / "bomb.zip"
    with zipfile.ZipFile(zp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("node7/server.log", log_bytes)
        with z.open("node7/zeros.log", "w", force_zip64=True) as f:
            block = b"\0" * (1024 * 1024)
            for _ in range(300):
                f.write(block)
    assert zp.stat().st_size < 2_000_000
    refused(hf("report", str(zp), "-o", str(tmp_path / "r.html")), "decompression bomb")


def test_a_tar_over_the_unpack_limit_is_refused(tmp_path: Path, log_bytes: bytes):
    tgz = _tar(tmp_path / "big.tar.gz", [_file("node7/server.log", log_bytes),
                                        _file("node7/more.log", log_bytes * 50)])
    p = hf("report", str(tgz), "-o", str(tmp_path / "r.html"), env={"HANGFORENSICS_MAX_UNPACK_BYTES": "100000"})
    refused(p, "HANGFORENSICS_MAX_UNPACK_BYTES")
    # the same bundle under the default limit is fine
    assert hf("report", str(tgz), "-o", str(tmp_path / "r.html")).returncode == 0


def test_a_damaged_archive_is_one_line(tmp_path: Path, log_bytes: bytes):
    tgz = _tar(tmp_path / "cut.tar.gz", [_file("node7/server.log", log_bytes * 20)])
    data = tgz.read_bytes()
    tgz.write_bytes(data[: len(data) // 2])
    refused(hf("report", str(tgz), "-o", str(tmp_path / "r.html")), "cannot unpack")
