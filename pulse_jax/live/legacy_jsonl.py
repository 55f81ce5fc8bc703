"""Reading the JSONL logs of earlier pulse-jax versions (formats 1-3), to convert them to the database.

A JSONL log is one header line (the run's configuration) and one line per
told batch (``"type": "tell"``) or per batch paid for but not yet told
(``"type": "paid"``). From version 2 every line carries ``crc``, the CRC-32
of the previous line's ``crc`` followed by the line's canonical JSON (see
`pulse_jax.live.chain`); version 1 has no checksums. A
``<log>.paid`` file beside the log holds paid batches that a full disk kept
out of the log, each line checksummed on its own.

Nothing here writes: a torn last line (a crash in mid-write) is left out of
what is returned, and said in ``notes``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from pulse_jax.errors import PulseInputError, note as note_, require
from pulse_jax.live.chain import checksum
from pulse_jax.live.log_schema import build_database, check_record_fields

#: The JSONL format versions this module reads.
VERSIONS = (1, 2, 3)


def looks_like_log(path: Path) -> bool:
    """Whether ``path``'s first line is a pulse-jax JSONL log header."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(1 << 20)
        header = json.loads(first.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(header, dict) and header.get("type") == "header"


def read(path: Path) -> tuple[dict, list[tuple[str, dict]], list[str]]:
    """``(header, [(where, record)], notes)`` of the JSONL log at ``path``, its checksum chain verified.

    Paid batches from the side file come last.
    Raises `PulseInputError` naming the first line that is unreadable or fails its checksum.
    """
    notes: list[str] = []
    try:
        data = path.read_bytes()
    except OSError as err:
        raise PulseInputError(f"{path}: cannot read the log: {err.strerror}") from None
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        previous = data[data.rfind(b"\n", 0, keep - 1) + 1:keep - 1] if keep else b""
        if _complete(data[keep:], previous):
            data += b"\n"
        else:
            notes.append(f"{path}: left out a torn last record ({len(data) - keep} bytes) from an interrupted write; "
                         "its batch was not logged and will be asked again")
            data = data[:keep]
    lines = data.split(b"\n")[:-1]
    require(lines, f"{path}: the log is empty")
    header = _parse(path, lines[0], 1)
    require(isinstance(header, dict) and header.get("type") == "header", f"{path}: line 1 is not a pulse-jax log header")
    absent = [k for k in HEADER_FIELDS if k not in header]
    require(not absent, f"{path}: line 1 is a log header without {', '.join(absent)}: not a log this pulse-jax wrote "
                        "(or one whose header was cut)")
    version = header.get("version", 1)
    require(isinstance(version, int) and version in VERSIONS,
            f"{path}: JSONL log format version {version!r} is not one this pulse-jax reads ({VERSIONS})")
    parsed = [(f"{path}: line {k}", _parse(path, raw, k)) for k, raw in enumerate(lines[1:], start=2)]
    if version == 1:
        # A version-1 log has no checksums; one whose lines carry them had its header edited.
        require(not any(isinstance(r, dict) and "crc" in r for _, r in parsed) and "crc" not in header,
                f"{path}: the header says version 1 (no checksums) but the lines carry checksums: was the header "
                "edited?")
    previous = _verify(path, header, "", 1, version)
    parsed = _without_trailer(path, header, parsed)
    records = []
    for k, (where, record) in enumerate(parsed, start=2):
        require(isinstance(record, dict) and record.get("type") in ("tell", "paid"),
                f"{where} is not a told or paid batch (was the log edited?)")
        check_record_fields(where, record)
        previous = _verify(path, record, previous, k, version)
        records.append((where, {key: v for key, v in record.items() if key != "crc"}))
    if "rows" in header:        # the trailer chains onto the last batch
        _verify(path, _parsed_trailer(path, lines), previous, len(lines), version)
    side = path.with_name(path.name + ".paid")
    if side.is_file():
        records += _side_records(side, notes)
    return {k: v for k, v in header.items() if k not in ("crc", "rows")}, records, notes


#: What every JSONL log header this project writes holds (the run's identity and shape).
HEADER_FIELDS = ("method", "seed", "models", "examples", "budget", "batch_size")


def _without_trailer(path: Path, header: dict, parsed: list) -> list:
    """An export's batches without its last line (``"type": "end"``), checked against the header's count;
    a log without ``rows`` in its header (written live by an earlier version) has no trailer."""
    if "rows" not in header:
        return parsed
    rows = header["rows"]
    require(isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0,
            f"{path}: line 1 says the export holds {rows!r} batches, not a count (was the file edited?)")
    trailer = parsed[-1][1] if parsed else None
    if not (isinstance(trailer, dict) and trailer.get("type") == "end"):
        held = len(parsed)
        raise PulseInputError(f"{path}: the export holds {held} of the {rows} batches its header announces and lacks "
                              "its last line: the file was cut short (restore it from the log or a copy)")
    require(trailer.get("rows") == rows == len(parsed) - 1,
            f"{path}: the export's last line counts {trailer.get('rows')!r} batches, its header {rows}, and it holds "
            f"{len(parsed) - 1} (was the file edited?)")
    return parsed[:-1]


def _parsed_trailer(path: Path, lines: list) -> dict:
    return _parse(path, lines[-1], len(lines))


def _side_records(side: Path, notes: list) -> list:
    out = []
    for k, raw in enumerate(side.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            notes.append(f"{side}: line {k} is torn; its batch will be asked again")
            continue
        require(isinstance(record, dict) and record.get("type") == "paid" and record.get("crc") == checksum(record, ""),
                f"{side}: line {k} fails its checksum (was the file edited?)")
        out.append((f"{side}: line {k}", {key: v for key, v in record.items() if key != "crc"}))
    return out


def _complete(tail: bytes, previous: bytes) -> bool:
    """Is ``tail`` a whole record whose checksum chains onto the line ``previous`` (b"" for none)?"""
    try:
        record = json.loads(tail.decode("utf-8"))
        before = json.loads(previous.decode("utf-8")).get("crc", "") if previous else ""
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False
    return isinstance(record, dict) and "crc" in record and record["crc"] == checksum(record, before)


def _parse(path: Path, raw: bytes, number: int):
    if not raw.strip():
        raise PulseInputError(f"{path}: line {number} is empty (was the log edited?)")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise PulseInputError(f"{path}: line {number} is not valid JSON (was the log edited?)") from None


def _verify(path: Path, record: dict, previous: str, number: int, version: int) -> str:
    if version < 2:
        return ""
    expected = checksum(record, previous)
    if record.get("crc") != expected:
        raise PulseInputError(f"{path}: line {number} fails its checksum: the line was changed, or a line before it "
                              "was deleted, duplicated or moved")
    return expected


def import_jsonl(source, target) -> int:
    """Write the JSONL log ``source`` (any version, verified) as a new log database ``target`` (which must
    not exist); returns the number of batches."""
    source, target = Path(source), Path(target)
    require(os.path.lexists(source), f"{source}: no such file")
    require(source.is_file(), f"{source}: not a file (a JSONL log is one file)")
    require(looks_like_log(source), f"{source}: not a pulse-jax JSONL log (its first line is not a log "
                                                 "header)")
    require(not target.exists(), f"{target}: exists; give a new file name (a log is never written over)")
    require(not os.path.lexists(target), f"{target}: is a symbolic link to {os.readlink(target) if target.is_symlink() else ''}, "
                                         "which does not exist; give a new file name (a link is never followed to "
                                         "write a log)")
    header, records, notes = read(source)
    for note in notes:
        note_(note)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = build_database(target, header, records)
    try:
        os.link(temporary, target)          # fails if target appeared meanwhile: never over a file
    except FileExistsError:
        raise PulseInputError(f"{target}: appeared while the log was converted; give a new file name (a log is "
                              "never written over)") from None
    finally:
        os.unlink(temporary)
    return len(records)


def as_jsonl(header: dict, records: list) -> str:
    """A log's header and records as a version-3 JSONL log (one checksum chain over every line), the
    format earlier pulse-jax versions wrote and `import_jsonl` reads. The header says how many batches
    follow (``rows``) and a last line (``"type": "end"``) says it again, so an export cut at a line break
    is refused instead of read as a shorter log."""
    header = {k: v for k, v in header.items() if k not in ("jsonl_version", "rows")}
    header["version"] = 3
    header["rows"] = len(records)
    lines, previous = [], ""
    for record in [header] + list(records) + [{"type": "end", "rows": len(records)}]:
        previous = checksum(record, previous)
        lines.append(json.dumps({**record, "crc": previous}) + "\n")
    return "".join(lines)


def checks_of(header: dict) -> str:
    """What reading a log verified, in words (`log show`): a checksum chain detects accidental damage --
    a torn write, a cut, a changed byte -- not an edit by someone who recomputes it."""
    caveat = "checksums are not signatures: anyone who can write the log can recompute them"
    if "jsonl_version" not in header and header.get("version", 1) == 1:
        return "a version-1 JSONL log: it has no checksums, so nothing in it could be verified"
    if header.get("jsonl_version") == 1:
        return (f"checksum chain intact since its conversion from a version-1 JSONL log, which had none ({caveat})")
    return f"checksum chain and row count intact: no accidental damage found ({caveat})"
