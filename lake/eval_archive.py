"""A direct reader of Inspect's ``.eval`` archive: the samples as plain dicts, no pydantic.

``read_eval_log`` validates every sample and event with pydantic (~1k samples/s on 2 cores);
the lake needs only a few fields of each, so this reader opens the zip itself, parses each
sample member with orjson and hands the dicts to ``lake.raw_rows``. It reads only archives
whose layout it knows, written in a log format version it knows (:data:`KNOWN_LOG_VERSIONS`):
anything else (an unknown version, a member it does not expect, a sample field it does not
know, JSON orjson refuses such as ``NaN``, a damaged member) raises :class:`UnrecognizedArchive`
and the caller reads the log with ``inspect_ai.log`` instead, which also names damage the way
``lake.ingest`` always has.

The header (one small member) is still validated with Inspect's own ``EvalLog`` model, so the
batch record is built from the same object either way.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterator
from functools import cache
from typing import Any, NamedTuple

import orjson
import zstandard

from evalrunner_assets.errors import EvalrunnerError

# Log format versions (header ``version``) whose sample layout this reader was checked against:
# Inspect writes LOG_SCHEMA_VERSION 2 (``inspect_ai._util.constants``) since 0.3.x' .eval format.
KNOWN_LOG_VERSIONS = frozenset({2})

# PKWARE's method id for zstd: Inspect writes zstd members (older versions deflate, read too)
_ZSTD = 93

HEADER = "header.json"
SAMPLES_PREFIX = "samples/"
# Members a finished .eval log holds besides its samples; anything else is a layout we do not know.
_OTHER_MEMBERS = frozenset({HEADER, "summaries.json", "reductions.json", "results.json"})
_JOURNAL_PREFIX = "_journal/"


class UnrecognizedArchive(EvalrunnerError):
    """The bytes are not an ``.eval`` archive this reader knows; read them with ``inspect_ai.log``
    (caught inside ``lake.ingest``: it never reaches a person)."""


@cache
def sample_fields() -> frozenset[str]:
    """The fields of Inspect's ``EvalSample``: a sample member with another is not read here."""
    from inspect_ai.log import EvalSample

    return frozenset(EvalSample.model_fields)


class EvalArchive:
    """An opened ``.eval`` log: the header (Inspect's ``EvalLog``, without samples) and the
    sample members, read on demand as plain dicts."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        # one per archive: a decompressor's context must not be used by two threads at once
        self._unzstd = zstandard.ZstdDecompressor()
        infos = _central_directory(data)
        # a re-logged sample appends a second member of the same name; the last one is current
        # (what zipfile and Inspect resolve a name to)
        members = {info.filename: info for info in infos}
        if HEADER not in members:
            raise UnrecognizedArchive("no header.json (an unfinished log)")
        self.sample_members: list[Member] = []
        for name, info in members.items():
            if name.startswith(SAMPLES_PREFIX) and name.endswith(".json"):
                self.sample_members.append(info)
            elif name not in _OTHER_MEMBERS and not name.startswith(_JOURNAL_PREFIX):
                raise UnrecognizedArchive(f"unexpected member {name!r}")
        raw = self.member_json(members[HEADER])
        if not isinstance(raw, dict):
            raise UnrecognizedArchive("header.json is not an object")
        version = raw.get("version")
        if type(version) is not int or version not in KNOWN_LOG_VERSIONS:
            raise UnrecognizedArchive(f"log format version {version!r} is not one this reader knows")
        self.version: int = version
        self.header = _header_log(raw)

    def packed(self, info: Member) -> bytes:
        """A member's compressed bytes, sliced from the archive after its local header. Read
        here rather than by ``ZipFile.read``, which costs ~100 µs a member in Python overhead,
        as much as parsing it; :func:`unpack_member` decompresses and checks them."""
        data, off = self._data, info.header_offset
        if info.flag_bits & 0x1 or data[off : off + 4] != b"PK\x03\x04":  # encrypted, or no local header
            raise UnrecognizedArchive(f"member {info.filename!r}: unexpected local header")
        name_len, extra_len = struct.unpack_from("<HH", data, off + 26)
        start = off + 30 + name_len + extra_len
        return data[start : start + info.compress_size]

    def member_bytes(self, info: Member) -> bytes:
        """A member's content, CRC-checked."""
        return unpack_member(info, self.packed(info), self._unzstd)

    def member_json(self, info: Member) -> Any:
        return _member_json(info, self.member_bytes(info))

    def samples(self) -> Iterator[dict[str, Any]]:
        """Every sample as the dict its member holds, in archive order (see :func:`sample_order`)."""
        fields = sample_fields()
        for info in self.sample_members:
            yield sample_dict(info, self.member_bytes(info), fields)


def unpack_member(info: Member, packed: bytes, unzstd: zstandard.ZstdDecompressor) -> bytes:
    """A member's content from its compressed bytes (:meth:`EvalArchive.packed`), CRC-checked.
    ``unzstd`` is used by one thread at a time: a decompressor's context is not shareable."""
    try:
        if info.compress_type == _ZSTD:
            content = _unzstd(unzstd, packed)
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            content = zlib.decompress(packed, -15)
        elif info.compress_type == zipfile.ZIP_STORED:
            content = packed
        else:
            raise UnrecognizedArchive(f"member {info.filename!r}: compression {info.compress_type}")
    except (zstandard.ZstdError, zlib.error) as exc:
        raise UnrecognizedArchive(f"member {info.filename!r}: {type(exc).__name__}") from exc
    if len(content) != info.file_size or zlib.crc32(content) != info.CRC:
        raise UnrecognizedArchive(f"member {info.filename!r} fails its size or CRC")
    return content


def _member_json(info: Member, content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:  # includes NaN and Infinity, which Inspect may write
        raise UnrecognizedArchive(f"member {info.filename!r}: {exc}") from exc


def sample_dict(info: Member, content: bytes, fields: frozenset[str]) -> dict[str, Any]:
    """A sample member's content as its dict, checked to be a shape this reader knows;
    ``fields`` are ``EvalSample``'s (:func:`sample_fields`)."""
    sample = _member_json(info, content)
    if not isinstance(sample, dict):
        raise UnrecognizedArchive(f"member {info.filename!r} is not an object")
    unknown = sample.keys() - fields
    if unknown:  # e.g. the deprecated 'score'/'transcript' Inspect migrates on validation
        raise UnrecognizedArchive(f"member {info.filename!r} has unknown fields {sorted(unknown)}")
    sid, epoch = sample.get("id"), sample.get("epoch")
    if type(sid) not in (int, str) or type(epoch) is not int:
        raise UnrecognizedArchive(f"member {info.filename!r} has no int/str id and int epoch")
    events = sample.get("events", [])
    if not isinstance(events, list):
        raise UnrecognizedArchive(f"member {info.filename!r}: events is not a list")
    return sample


class Member(NamedTuple):
    """One central-directory entry, named as ``zipfile.ZipInfo`` names the fields."""

    filename: str
    flag_bits: int
    compress_type: int
    CRC: int
    compress_size: int
    file_size: int
    header_offset: int


_EOCD = struct.Struct("<4s4H2LH")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_ZIP64_MARK = 0xFFFFFFFF


def _central_directory(data: bytes) -> list[Member]:
    """The archive's members in directory order. zipfile's own parse of the directory costs
    ~100 µs a member (a log of 10k samples: a second); a zip64 or damaged directory, which
    Inspect's small logs do not have, is left to zipfile by way of inspect_ai.log."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if at < 0 or len(data) < at + _EOCD.size:
        raise UnrecognizedArchive("no end-of-central-directory record")
    _, _, _, _, count, size, offset, _ = _EOCD.unpack_from(data, at)
    if offset == _ZIP64_MARK or count == 0xFFFF or offset + size > at:
        raise UnrecognizedArchive("zip64 or inconsistent central directory")
    members: list[Member] = []
    pos = offset
    for _ in range(count):
        if data[pos : pos + 4] != b"PK\x01\x02":
            raise UnrecognizedArchive("damaged central directory")
        fields = _CENTRAL.unpack_from(data, pos)
        flags, method, crc, csize, usize = fields[3], fields[4], fields[7], fields[8], fields[9]
        name_len, extra_len, comment_len, local = fields[10], fields[11], fields[12], fields[16]
        if _ZIP64_MARK in (csize, usize, local):
            raise UnrecognizedArchive("zip64 member")
        raw_name = data[pos + _CENTRAL.size : pos + _CENTRAL.size + name_len]
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
        members.append(Member(name, flags, method, crc, csize, usize, local))
        pos += _CENTRAL.size + name_len + extra_len + comment_len
    return members


def _unzstd(decompressor: zstandard.ZstdDecompressor, packed: bytes) -> bytes:
    # Inspect splits large members into several zstd frames; a decompressobj stops at a frame's end
    parts = []
    while packed:
        dobj = decompressor.decompressobj()
        parts.append(dobj.decompress(packed))
        packed = dobj.unused_data
    return b"".join(parts)


def sample_order(sample: dict[str, Any]) -> tuple[int, str]:
    """The key ``inspect_ai.log`` sorts a log's samples by: epoch, then id (integers zero-padded)."""
    sid = sample["id"]
    return sample["epoch"], sid if isinstance(sid, str) else str(sid).zfill(20)


def _header_log(raw: dict[str, Any]) -> Any:
    from inspect_ai._util.constants import get_deserializing_context
    from inspect_ai.log import EvalLog

    try:
        log = EvalLog.model_validate(raw, context=get_deserializing_context())
    except Exception as exc:  # not a header Inspect accepts: its own reader says why
        raise UnrecognizedArchive(f"header.json: {type(exc).__name__}") from exc
    log.location = ""
    return log
