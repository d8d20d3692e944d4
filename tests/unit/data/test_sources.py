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
