"""The one exception tree of the `rsm` package.

Every operating error the state-machine framework raises or answers with is a
subclass of `RsmError`.  Each class says whether the request that produced it
may be sent again as it is (`retryable`):

* retryable: the cause is transient or the outcome is unknown, and sending the
  same command again *with the same session seq* is safe, because the session
  table applies a `(client_id, seq)` at most once;
* not retryable: sending the same thing again gives the same answer.

Errors a replica answers to a client over the wire are `StatusError`s; each
has one `RsmStatus` code and the codes map one-to-one onto classes through
`STATUS_ERRORS`.  An error travels as `(status, message, detail)`:
`wire_fields` turns an error into that triple, `error_for_status` turns it
back.  `detail` carries the one extra datum some errors need: the leader's
address for `NotLeader` (when known), the exception type name for
`CommandFailed`; it is None for every other class.

Errors that never cross the wire (a malformed znode value, an illegal log
transition, a badly declared state machine) subclass `RsmError` directly.
Programmer errors are `assert`s, never classes here.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class RsmStatus(enum.IntEnum):
    """Status codes of the client<->replica protocol (wire values, never renumber)."""

    OK = 0
    NOT_LEADER = 1
    OUTCOME_UNKNOWN = 2
    UNAVAILABLE = 3
    TIMEOUT = 4
    OVERLOADED = 5
    COMMAND_FAILED = 10
    UNKNOWN_COMMAND = 11
    BAD_ARGUMENTS = 12
    BAD_REQUEST = 13
    STALE_REQUEST = 14
    SESSION_EXPIRED = 15
    TRUNCATED = 16
    DIVERGED = 17
    UNAUTHENTICATED = 18
    FORBIDDEN = 19


class RsmError(Exception):
    """Root of every operating error in the rsm package."""

    retryable: ClassVar[bool] = False


# --- errors answered to clients ---------------------------------------------------------------


class StatusError(RsmError):
    """An error with a wire status: a replica may answer a request with it."""

    status: ClassVar[RsmStatus]

    def __init__(self, message: str = "", detail: str | None = None) -> None:
        # An empty message would print as nothing; the status name says at least what kind.
        message = message or self.status.name.lower().replace("_", " ")
        super().__init__(message)
        self.message = message
        self.detail = detail


class NotLeader(StatusError):
    """This replica is not the leader; the command was NOT logged.

    `detail` is the address of the replica believed to lead, or None when
    unknown.  Retry there (or after rediscovering the leader).
    """

    status = RsmStatus.NOT_LEADER
    retryable = True

    @property
    def leader_address(self) -> str | None:
        return self.detail


class OutcomeUnknown(StatusError):
    """The command may or may not have been applied (leader stepped down, connection lost).

    Retrying with the same session seq is safe: if it was applied, the session
    table answers the recorded result instead of applying it again.
    """

    status = RsmStatus.OUTCOME_UNKNOWN
    retryable = True


class Unavailable(StatusError):
    """No leader right now, or the replica cannot reach bookies/ZooKeeper; try again later."""

    status = RsmStatus.UNAVAILABLE
    retryable = True


class Timeout(StatusError):
    """The request did not complete within its deadline; its outcome is unknown."""

    status = RsmStatus.TIMEOUT
    retryable = True


class Overloaded(StatusError):
    """A bound of the replica is full, nothing was applied: the command queue or the read
    waiters (nothing logged), or the session table, full of sessions too recent to evict, when
    the command would start a new session (logged, refused by every replica alike)."""

    status = RsmStatus.OVERLOADED
    retryable = True


class CommandFailed(StatusError):
    """The command or query raised: the application's deterministic error.

    `type_name` is the name of the exception's type (`"TypeError"`) and
    `message` its text (`"amount must be an integer"`), the same on every
    replica; on the wire the type name travels as `detail`.  A command's
    failure is recorded like a result: retrying returns the same error (the
    session table recorded it).
    """

    status = RsmStatus.COMMAND_FAILED

    @property
    def type_name(self) -> str | None:
        """The name of the type of the exception the application raised (None only from a
        replica that did not send one)."""
        return self.detail


class UnknownCommand(StatusError):
    """The state machine has no command or query of that name (or version)."""

    status = RsmStatus.UNKNOWN_COMMAND


class BadArguments(StatusError):
    """The arguments do not fit the command's signature, or cannot be encoded in CBOR."""

    status = RsmStatus.BAD_ARGUMENTS


class BadRequest(StatusError):
    """The request is malformed or exceeds a size bound; sending it again cannot help."""

    status = RsmStatus.BAD_REQUEST


class StaleRequest(StatusError):
    """The command's seq is at or below what the session has acknowledged or forgotten.

    The client already had (or gave up on) the answer to that seq; the replica
    no longer keeps it, and applying the command again would break exactly-once.
    """

    status = RsmStatus.STALE_REQUEST


class SessionExpired(StatusError):
    """The client's session was dropped (idle past the TTL, or evicted at the session bound).

    Its recorded results are gone, so a retry could apply a command twice:
    the client must start a new session and find out by reading what happened.
    """

    status = RsmStatus.SESSION_EXPIRED


class Truncated(StatusError):
    """The position is below the log's truncation point; start from a snapshot."""

    status = RsmStatus.TRUNCATED


class Diverged(StatusError):
    """A replica's state hash differs from the one recorded in the log (non-determinism)."""

    status = RsmStatus.DIVERGED


class NotAuthenticated(StatusError):
    """The replica requires a client token and this connection has not presented one it knows
    (docs/security.md, "Client tokens"); nothing was done."""

    status = RsmStatus.UNAUTHENTICATED


class Forbidden(StatusError):
    """The client's token does not allow this request (docs/security.md, "Client tokens":
    roles); nothing was done."""

    status = RsmStatus.FORBIDDEN


STATUS_ERRORS: dict[RsmStatus, type[StatusError]] = {
    cls.status: cls
    for cls in (
        NotLeader,
        NotAuthenticated,
        Forbidden,
        OutcomeUnknown,
        Unavailable,
        Timeout,
        Overloaded,
        CommandFailed,
        UnknownCommand,
        BadArguments,
        BadRequest,
        StaleRequest,
        SessionExpired,
        Truncated,
        Diverged,
    )
}


def error_for_status(status: int, message: str = "", detail: str | None = None) -> StatusError:
    """The exception a client raises for a non-OK wire status (unknown codes are BAD_REQUEST)."""
    assert status != RsmStatus.OK
    try:
        cls = STATUS_ERRORS[RsmStatus(status)]
    except ValueError:
        return BadRequest(f"unknown status {status}: {message}")
    return cls(message, detail)


def wire_fields(error: StatusError) -> tuple[RsmStatus, str, str | None]:
    """The `(status, message, detail)` a replica answers for an error it raised."""
    return error.status, error.message, error.detail


# --- errors that stay local -------------------------------------------------------------------


class MalformedValue(RsmError):
    """A log entry, log znode value or coordination znode value could not be decoded.

    Raised instead of guessing: the message names what was wrong.
    """


class ExportCorrupt(MalformedValue):
    """An exported log file (rsm/tools/export_format.py) is truncated, damaged or not one;
    the message names the byte offset and the entry where reading stopped."""


class IllegalLogTransition(RsmError):
    """A change to the log of segments that would break I1, I4 or index continuity."""


class SnapshotCorrupt(RsmError):
    """A snapshot's bytes fail a check: a chunk's CRC, its sequence, the manifest's sizes or
    hashes, or the structure of its records.  The replica skips it for an older one."""


class BadSnapshotState(RsmError):
    """The default snapshot codec cannot encode the state machine's public attributes.

    The message names the attribute and its type: make it private (a name
    starting with `_`) or override `snapshot()` / `restore()`.
    """


class ContextUnavailable(RsmError):
    """`StateMachine.context` was used outside a command being applied (e.g. in a query)."""


class BadStateMachine(RsmError):
    """A StateMachine subclass declares commands or queries wrongly (raised at class creation)."""


class InvalidConfig(RsmError):
    """A replica's or client's setting is not acceptable (app name, replica id, quorums, ...).

    The message names the setting and what would be acceptable.
    """


class NoSuchApplication(InvalidConfig):
    """No application of that name exists in this ZooKeeper: no replica of it ever ran (its
    log znode is absent), or the name or the ZooKeeper chroot is misspelt."""

    def __init__(self, app: str) -> None:
        super().__init__(f"there is no application {app!r} in this ZooKeeper")
        self.app = app


class NoAddressForTransport(InvalidConfig):
    """A replica publishes no port for the client's transport: a client with TLS met a
    replica without a TLS port, or a plain client one with only a TLS port
    (docs/security.md, "Moving replicas to TLS")."""

    def __init__(self, replica_id: str, *, tls: bool) -> None:
        wanted, hint = (
            ("TLS", "give it --tls-listen, or connect without TLS")
            if tls
            else ("plain", "it serves TLS only: connect with --tls-ca-file")
        )
        super().__init__(f"replica {replica_id} has no {wanted} port ({hint})")
        self.replica_id = replica_id


class NotReducible(InvalidConfig):
    """A log holds what an application's Spark reducer cannot reduce exactly (`rsm spark
    snapshot`): the message names the first such index and command, and why.  Replay (the
    replicas' own way) still reaches the state."""


class ProtocolViolation(RsmError):
    """The peer sent bytes that are not a message of the client protocol (rsm/core/protocol.py).

    Nothing can be answered (no request id, or an unframeable stream), so the
    connection is closed.
    """


class HistoryError(RsmError):
    """A test history cannot be recorded, decoded or checked as given.

    A malformed JSON line, a completion before its invocation, two events at
    the same (time, sequence number), an operation the model does not know, or
    more operations than `limits.history_operations_max`.  The message names
    the operation (or line) and what is wrong with it.
    """


class EntryUnreadable(RsmError):
    """An entry of a log or ledger could not be read or decoded (rsm.spark).

    The message names the ledger, the entry and the bookies that hold it, and
    why: no copy could be served (every copy corrupt, absent or unreachable),
    or its bytes are not a batch of the log; or the log names a ledger the
    ledger cluster does not have.
    """
