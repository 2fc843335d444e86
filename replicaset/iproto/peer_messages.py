"""Typed peer messages: every peer body is decoded and validated here, once.

A peer request can come from anyone who can reach the port, so nothing in it is used
before it is checked: UUIDs are UUIDs, addresses are short HOST:PORT strings, vclocks map
origins in 0..31 to LSNs, ids are in range, rows are valid WAL records. A bad field is a
`RemoteProtocolError` naming the request and the field (answered with an error reply,
the connection kept), so the caller registers nothing and sends nothing for it.
"""

from __future__ import annotations

import uuid as uuid_module
from dataclasses import dataclass
from typing import Any

from wal import Record, VClock, WalError, decode_record

from .codec import Frame
from .constants import ErrorCode, Key
from .errors import RemoteProtocolError
from .peer import PeerKey
from .peer_auth import NONCE_BYTES, PROOF_BYTES

ADDRESS_BYTES_MAX = 255
INSTANCE_ID_MIN, INSTANCE_ID_MAX = 1, 31
U64_MAX = 2**64 - 1
READS_MAX = 100_000  # keys of one quorum transaction
TXN_IDS_MAX = 10_000  # transactions in one heartbeat


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """What a joiner kept of an interrupted checkpoint transfer: the first `offset` bytes,
    whose xxh3_64 is `digest`, of the checkpoint with `vclock` and `size`. The member serving
    the next JOIN sends only the rest when its checkpoint is that one (docs/design/anti-entropy.md)."""

    vclock: VClock
    size: int
    offset: int
    digest: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """JOIN: an instance of `replicaset_uuid` asking for an id (and the rest of a checkpoint
    it kept a prefix of, when `resume` says so)."""

    replicaset_uuid: str
    instance_uuid: str
    address: str
    anonymous: bool = False
    resume: Resume | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    replicaset_uuid: str
    instance_uuid: str
    replica_id: int | None
    vclock: VClock
    last_txn: dict[int, tuple[int, int]]
    include_own: bool
    anonymous: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribed:
    """The relay's answer to SUBSCRIBE: who it is and what it holds."""

    instance_uuid: str
    vclock: VClock


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointChunk:
    """Bytes `offset..offset + len(chunk)` of the checkpoint with `vclock` and `size`; the
    two name the checkpoint, so that a joiner can ask for the rest of it later."""

    chunk: bytes
    offset: int
    size: int
    digest: int
    vclock: VClock
    instance_id: int | None = None  # the joiner's, registered before the first chunk; None from older members


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """The end of a JOIN: the checkpoint's vclock, size and digest, the joiner's id, and
    the members registered at the member serving it, whom the joiner follows until its own
    `_cluster` names them (`JoinUpstream`)."""

    vclock: VClock
    size: int
    digest: int
    instance_id: int
    origin: int
    lsn: int
    barrier: VClock
    registered: tuple[tuple[int, str, str], ...] = ()  # (id, uuid, address) at the member serving it


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnRequest:
    """A quorum transaction message from member `sender` (its id and UUID, which the
    server checks against `_cluster`). `txn_ids` holds one id, or a heartbeat's many."""

    replicaset_uuid: str
    instance_uuid: str
    sender: int
    txn_ids: tuple[int, ...]

    @property
    def txn_id(self) -> int:
        return self.txn_ids[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnPrepare:
    request: TxnRequest
    coordinator: int
    members: frozenset[int]
    reads: dict[tuple[str, str], tuple[int, int]]  # (table, key) -> (hlc, origin); (0, 0): none


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnVote:
    """PREPARE's answer: `prepared`, or the conflict (table, key, holder txn id, the
    member coordinating it); neither when the outcome was known."""

    prepared: bool
    conflict: tuple[str, str, int | None, int | None] | None
    held: VClock | None = None  # a vote for a membership change: what the voter holds


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerAuth:
    """PEER_AUTH: member `instance_uuid` answers the greeting's salt with `proof`, and
    challenges the server with `nonce`."""

    instance_uuid: str
    nonce: bytes
    proof: bytes


# ---------------------------------------------------------------- requests a member serves


def peer_auth(frame: Frame) -> PeerAuth:
    body = _Body(frame, "PEER_AUTH")
    return PeerAuth(
        instance_uuid=body.uuid(Key.INSTANCE_UUID, "INSTANCE_UUID"),
        nonce=body.binary(PeerKey.NONCE, "NONCE", NONCE_BYTES),
        proof=body.binary(PeerKey.PROOF, "PROOF", PROOF_BYTES),
    )


def hello(frame: Frame, request: str) -> Hello:
    body = _Body(frame, request)
    return Hello(
        replicaset_uuid=body.uuid(Key.REPLICASET_UUID, "REPLICASET_UUID"),
        instance_uuid=body.uuid(Key.INSTANCE_UUID, "INSTANCE_UUID"),
        address=body.address(PeerKey.ADDRESS, "ADDRESS"),
        anonymous=body.flag(PeerKey.ANONYMOUS, "ANONYMOUS"),
        resume=body.resume(PeerKey.RESUME, "RESUME") if PeerKey.RESUME in frame.body else None,
    )


def subscribe(frame: Frame) -> Subscribe:
    body = _Body(frame, "SUBSCRIBE")
    replica_id = frame.header.get(Key.REPLICA_ID)
    if replica_id is not None and not _is_int(replica_id, INSTANCE_ID_MIN, INSTANCE_ID_MAX):
        raise body.error("REPLICA_ID", f"must be an instance id in {INSTANCE_ID_MIN}..{INSTANCE_ID_MAX}")
    anonymous = body.flag(PeerKey.ANONYMOUS, "ANONYMOUS")
    if anonymous and replica_id is not None:
        raise body.error("REPLICA_ID", "an anonymous follower has no instance id")
    return Subscribe(
        replicaset_uuid=body.uuid(Key.REPLICASET_UUID, "REPLICASET_UUID"),
        instance_uuid=body.uuid(Key.INSTANCE_UUID, "INSTANCE_UUID"),
        replica_id=replica_id,
        vclock=body.vclock(Key.VCLOCK, "VCLOCK"),
        last_txn=body.last_txn(PeerKey.LAST_TXN, "LAST_TXN"),
        include_own=body.flag(PeerKey.INCLUDE_OWN, "INCLUDE_OWN"),
        anonymous=anonymous,
    )


def ack(frame: Frame) -> VClock:
    return _Body(frame, "ACK").vclock(Key.VCLOCK, "VCLOCK")


def txn_request(frame: Frame, request: str) -> TxnRequest:
    """ABORT, COMMIT's header, QUERY: one txn id; HEARTBEAT: `TXN_IDS`."""
    body = _Body(frame, request)
    sender = frame.header.get(Key.REPLICA_ID)
    if not _is_int(sender, INSTANCE_ID_MIN, INSTANCE_ID_MAX):
        raise body.error("REPLICA_ID", f"must be the sender's instance id in {INSTANCE_ID_MIN}..{INSTANCE_ID_MAX}")
    if PeerKey.TXN_IDS in frame.body:
        ids = body.required(PeerKey.TXN_IDS, "TXN_IDS")
        if not isinstance(ids, list) or not 0 < len(ids) <= TXN_IDS_MAX or not all(_is_int(i, 1, U64_MAX) for i in ids):
            raise body.error("TXN_IDS", f"must be 1..{TXN_IDS_MAX} txn ids")
        txn_ids = tuple(ids)
    else:
        txn_ids = (body.integer(PeerKey.TXN_ID, "TXN_ID", 1, U64_MAX),)
    return TxnRequest(replicaset_uuid=body.uuid(Key.REPLICASET_UUID, "REPLICASET_UUID"),
                      instance_uuid=body.uuid(Key.INSTANCE_UUID, "INSTANCE_UUID"), sender=sender, txn_ids=txn_ids)


def txn_prepare(frame: Frame) -> TxnPrepare:
    body = _Body(frame, "PREPARE")
    members = body.required(PeerKey.MEMBERS, "MEMBERS")
    if (not isinstance(members, list) or not members or len(members) > INSTANCE_ID_MAX
            or not all(_is_int(m, INSTANCE_ID_MIN, INSTANCE_ID_MAX) for m in members)):
        raise body.error("MEMBERS", f"must be 1..{INSTANCE_ID_MAX} instance ids")
    coordinator = body.integer(PeerKey.COORDINATOR, "COORDINATOR", INSTANCE_ID_MIN, INSTANCE_ID_MAX)
    if coordinator not in members:
        raise body.error("COORDINATOR", f"{coordinator} is not one of MEMBERS {sorted(members)}")
    raw = body.required(PeerKey.READS, "READS")
    if not isinstance(raw, list) or not 0 < len(raw) <= READS_MAX:
        raise body.error("READS", f"must be 1..{READS_MAX} [table, key, hlc, origin] entries")
    reads: dict[tuple[str, str], tuple[int, int]] = {}
    for i, entry in enumerate(raw):
        if not (isinstance(entry, list) and len(entry) == 4 and all(isinstance(v, str) and v for v in entry[:2])
                and "/" not in entry[0] and _is_int(entry[2], 0, U64_MAX) and _is_int(entry[3], 0, INSTANCE_ID_MAX)):
            raise body.error("READS", f"entry {i} is not [table, key, hlc, origin]: {_short(entry)}")
        reads[(entry[0], entry[1])] = (entry[2], entry[3])
    return TxnPrepare(request=txn_request(frame, "PREPARE"), coordinator=coordinator, members=frozenset(members),
                      reads=reads)


def txn_commit(frame: Frame) -> tuple[TxnRequest, Record]:
    """COMMIT carries the transaction's WAL row, exactly as written."""
    request = txn_request(frame, "COMMIT")
    records = rows(frame)
    if len(records) != 1:
        raise _Body(frame, "COMMIT").error("RECORDS", f"must hold the one row of the transaction, got {len(records)}")
    return request, records[0]


def txn_query(frame: Frame, name: str = "QUERY") -> tuple[TxnRequest, int]:
    """QUERY and QUERY_ROW: the transaction and its coordinator."""
    coordinator = _Body(frame, name).integer(PeerKey.COORDINATOR, "COORDINATOR", INSTANCE_ID_MIN, INSTANCE_ID_MAX)
    return txn_request(frame, name), coordinator


# ---------------------------------------------------------------- replies and streams a member receives


def peer_auth_reply(frame: Frame) -> bytes:
    """The server's proof."""
    return _Body(frame, "PEER_AUTH reply").binary(PeerKey.PROOF, "PROOF", PROOF_BYTES)


def subscribed(frame: Frame) -> Subscribed:
    body = _Body(frame, "SUBSCRIBE reply")
    return Subscribed(
        instance_uuid=body.uuid(Key.INSTANCE_UUID, "INSTANCE_UUID"),
        vclock=body.vclock(Key.VCLOCK, "VCLOCK"),
    )


def rows(frame: Frame) -> list[Record]:
    body = _Body(frame, "ROWS")
    raw = body.required(PeerKey.RECORDS, "RECORDS")
    if not isinstance(raw, list):
        raise body.error("RECORDS", "must be an array of WAL records")
    records = []
    for i, item in enumerate(raw):
        if not isinstance(item, bytes):
            raise body.error("RECORDS", f"item {i} is not binary")
        try:
            record, end = decode_record(item)
        except WalError as exc:
            raise body.error("RECORDS", f"item {i} is not a valid WAL record: {exc}") from exc
        if end != len(item):
            raise body.error("RECORDS", f"item {i} has {len(item) - end} bytes after its record")
        records.append(record)
    return records


def txn_vote(frame: Frame) -> TxnVote:
    body = _Body(frame, "PREPARE reply")
    vote = frame.body.get(PeerKey.VOTE)
    if vote not in ("prepared", "conflict", None):
        raise body.error("VOTE", f"must be 'prepared', 'conflict' or nil, got {_short(vote)}")
    if vote != "conflict":
        held = body.vclock(PeerKey.HELD, "HELD") if PeerKey.HELD in frame.body else None
        return TxnVote(prepared=vote == "prepared", conflict=None, held=held)
    conflict = body.required(PeerKey.CONFLICT, "CONFLICT")
    if not (isinstance(conflict, list) and len(conflict) == 4 and all(isinstance(v, str) for v in conflict[:2])
            and (conflict[2] is None or _is_int(conflict[2], 1, U64_MAX))
            and (conflict[3] is None or _is_int(conflict[3], 1, INSTANCE_ID_MAX))):
        raise body.error("CONFLICT", f"must be [table, key, holder txn id or nil, holder instance id or nil], "
                                     f"got {_short(conflict)}")
    return TxnVote(prepared=False, conflict=(conflict[0], conflict[1], conflict[2], conflict[3]))


def txn_decision(frame: Frame) -> str | None:
    decision = frame.body.get(PeerKey.DECISION)
    if decision not in ("commit", "abort", None):
        raise _Body(frame, "QUERY reply").error("DECISION", f"must be 'commit', 'abort' or nil, got {_short(decision)}")
    return decision


def txn_row_answer(frame: Frame) -> str | None:
    """QUERY_ROW's answer: a decision, "no_row", or nil (not yet)."""
    answer = frame.body.get(PeerKey.DECISION)
    if answer not in ("commit", "abort", "no_row", None):
        raise _Body(frame, "QUERY_ROW reply").error("DECISION", "must be 'commit', 'abort', 'no_row' or nil, "
                                                                f"got {_short(answer)}")
    return answer


def heartbeat(frame: Frame) -> VClock:
    return _Body(frame, "HEARTBEAT").vclock(Key.VCLOCK, "VCLOCK")


def checkpoint_chunk(frame: Frame) -> CheckpointChunk:
    body = _Body(frame, "CHECKPOINT_CHUNK")
    chunk = body.required(PeerKey.CHUNK, "CHUNK")
    if not isinstance(chunk, bytes):
        raise body.error("CHUNK", "must be binary")
    size = body.integer(PeerKey.SIZE, "SIZE", 0, U64_MAX)
    offset = body.integer(PeerKey.OFFSET, "OFFSET", 0, size)
    if offset + len(chunk) > size:
        raise body.error("CHUNK", f"of {len(chunk)} bytes at offset {offset} ends past SIZE {size}")
    body.required(Key.VCLOCK, "VCLOCK")
    return CheckpointChunk(
        chunk=chunk,
        offset=offset,
        size=size,
        digest=body.integer(PeerKey.DIGEST, "DIGEST", 0, U64_MAX),
        vclock=body.vclock(Key.VCLOCK, "VCLOCK"),
        instance_id=(body.integer(PeerKey.INSTANCE_ID, "INSTANCE_ID", 0, INSTANCE_ID_MAX)
                     if PeerKey.INSTANCE_ID in frame.body else None),
    )


def joined(frame: Frame, *, anonymous: bool = False) -> Joined:
    """The end of a JOIN; an anonymous follower's carries instance id 0 and no
    registration (it is never registered)."""
    body = _Body(frame, "JOIN reply")
    if anonymous:
        return Joined(
            vclock=body.vclock(Key.VCLOCK, "VCLOCK"),
            size=body.integer(PeerKey.SIZE, "SIZE", 0, U64_MAX),
            digest=body.integer(PeerKey.DIGEST, "DIGEST", 0, U64_MAX),
            instance_id=body.integer(PeerKey.INSTANCE_ID, "INSTANCE_ID", 0, 0),
            origin=0,
            lsn=0,
            barrier=VClock(),
        )
    row = body.required(PeerKey.REGISTRATION_ROW, "REGISTRATION_ROW")
    if not (isinstance(row, list) and len(row) == 2 and _is_int(row[0], INSTANCE_ID_MIN, INSTANCE_ID_MAX)
            and _is_int(row[1], 0, U64_MAX)):
        raise body.error("REGISTRATION_ROW", f"must be [origin, lsn], got {_short(row)}")
    origin, lsn = row
    return Joined(
        vclock=body.vclock(Key.VCLOCK, "VCLOCK"),
        size=body.integer(PeerKey.SIZE, "SIZE", 0, U64_MAX),
        digest=body.integer(PeerKey.DIGEST, "DIGEST", 0, U64_MAX),
        instance_id=body.integer(PeerKey.INSTANCE_ID, "INSTANCE_ID", INSTANCE_ID_MIN, INSTANCE_ID_MAX),
        origin=origin,
        lsn=lsn,
        barrier=body.vclock(PeerKey.BARRIER, "BARRIER"),
        registered=body.registered(PeerKey.REGISTERED, "REGISTERED"),
    )


# ---------------------------------------------------------------- fields


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class _Body:
    def __init__(self, frame: Frame, request: str) -> None:
        self.frame = frame
        self.request = request

    def error(self, field: str, problem: str) -> RemoteProtocolError:
        return RemoteProtocolError(
            f"{self.request}: field {field} {problem}", fatal=False, sync=self.frame.sync, code=ErrorCode.PROTOCOL
        )

    def required(self, key: int, field: str) -> Any:
        if key not in self.frame.body:
            raise self.error(field, "is missing")
        return self.frame.body[key]

    def uuid(self, key: int, field: str) -> str:
        return self._uuid_of(self.required(key, field), field)

    def _uuid_of(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or len(value) != 36:
            raise self.error(field, "must be a UUID string of 36 characters")
        try:
            return str(uuid_module.UUID(value))
        except ValueError:
            raise self.error(field, f"is not a UUID: {value!r}") from None

    def address(self, key: int, field: str) -> str:
        return self._address_of(self.required(key, field), field)

    def _address_of(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not 0 < len(value.encode()) <= ADDRESS_BYTES_MAX:
            raise self.error(field, f"must be HOST:PORT of at most {ADDRESS_BYTES_MAX} bytes")
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise self.error(field, f"is not HOST:PORT: {value!r}")
        if not value.isprintable() or " " in value:
            raise self.error(field, f"has spaces or control characters: {value!r}")
        return value

    def integer(self, key: int, field: str, low: int, high: int) -> int:
        value = self.required(key, field)
        if not _is_int(value, low, high):
            raise self.error(field, f"must be an integer in {low}..{high}, got {_short(value)}")
        return value

    def binary(self, key: int, field: str, size: int) -> bytes:
        value = self.required(key, field)
        if not isinstance(value, bytes) or len(value) != size:
            raise self.error(field, f"must be {size} bytes of binary, got {_short(value)}")
        return value

    def flag(self, key: int, field: str) -> bool:
        value = self.frame.body.get(key, False)
        if not isinstance(value, bool):
            raise self.error(field, f"must be a boolean, got {_short(value)}")
        return value

    def vclock(self, key: int, field: str) -> VClock:
        value = self.frame.body.get(key, {})
        if not isinstance(value, dict):
            raise self.error(field, f"must be a map of origin to LSN, got {_short(value)}")
        try:
            return VClock(value)
        except ValueError as exc:
            raise self.error(field, str(exc)) from None

    def registered(self, key: int, field: str) -> tuple[tuple[int, str, str], ...]:
        """`[[instance id, uuid, address], ...]`, none when absent; an empty address (a
        member registered without one) is kept as it is."""
        value = self.frame.body.get(key, [])
        if not isinstance(value, list) or len(value) > INSTANCE_ID_MAX:
            raise self.error(field, f"must be a list of at most {INSTANCE_ID_MAX} members, got {_short(value)}")
        members = []
        for member in value:
            if not (isinstance(member, list) and len(member) == 3 and _is_int(member[0], INSTANCE_ID_MIN, INSTANCE_ID_MAX)):
                raise self.error(field, f"must hold [instance id, uuid, address] entries, got {_short(member)}")
            instance_id, uuid, address = member
            members.append((instance_id, self._uuid_of(uuid, field),
                            address if address == "" else self._address_of(address, field)))
        return tuple(members)

    def resume(self, key: int, field: str) -> Resume:
        value = self.required(key, field)
        if not (isinstance(value, list) and len(value) == 4 and isinstance(value[0], dict)
                and all(_is_int(v, 0, U64_MAX) for v in value[1:])):
            raise self.error(field, f"must be [vclock, size, offset, digest], got {_short(value)}")
        vclock, size, offset, digest = value
        if offset > size:
            raise self.error(field, f"offset {offset} is past the checkpoint's size {size}")
        try:
            return Resume(vclock=VClock(vclock), size=size, offset=offset, digest=digest)
        except ValueError as exc:
            raise self.error(field, f"vclock: {exc}") from None

    def last_txn(self, key: int, field: str) -> dict[int, tuple[int, int]]:
        value = self.frame.body.get(key, {})
        if not isinstance(value, dict):
            raise self.error(field, f"must be a map of origin to [lsn, txn id], got {_short(value)}")
        result = {}
        for origin, pair in value.items():
            if not _is_int(origin, 0, INSTANCE_ID_MAX):
                raise self.error(field, f"origin {_short(origin)} is not in 0..{INSTANCE_ID_MAX}")
            if not (isinstance(pair, list) and len(pair) == 2 and all(_is_int(v, 0, U64_MAX) for v in pair)):
                raise self.error(field, f"origin {origin}: expected [lsn, txn id], got {_short(pair)}")
            result[origin] = (pair[0], pair[1])
        return result


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
