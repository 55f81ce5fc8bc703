"""The checksum chain that makes an edited, deleted, duplicated or reordered log record detectable.

Each record's ``crc`` is the CRC-32 (8 hex digits) of the previous record's
``crc`` followed by the record's canonical JSON (sorted keys, no spaces,
without ``crc``). A record that no longer fits its place in the chain names
the first place where the log was changed. It detects accidents and casual
edits, not a forger who recomputes the chain; the values themselves are
still validated on replay.
"""
from __future__ import annotations

import json
import zlib


def canonical(record: dict) -> str:
    """``record`` as canonical JSON, without its ``crc``."""
    return json.dumps({k: v for k, v in record.items() if k != "crc"}, sort_keys=True, separators=(",", ":"))


def checksum(record: dict, previous: str) -> str:
    """The chained CRC-32 of ``record`` after the record whose checksum is ``previous``."""
    return f"{zlib.crc32((previous + canonical(record)).encode('utf-8')) & 0xFFFFFFFF:08x}"
