"""The one exception tree of the `bookie` package.

Every operating error raised by the bookie server, the ledger client and the
metadata layer is a subclass of `BookieError`.  Each class says whether the
operation that raised it may be retried as it is (`retryable`): a retryable
error means "the outcome is unknown or the cause is transient; trying again
(possibly elsewhere) is safe", a non-retryable one means "trying the same thing
again gives the same answer".

Wire status codes map one-to-one onto classes through `STATUS_ERRORS`; the
client turns a non-OK status into an exception with `error_for_status` and the
server turns an exception into a status with `status_for_error`.  Programmer
errors are `assert`s, never classes here.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class Status(enum.IntEnum):
    """Status codes carried by every bookie response (wire values, never renumber)."""

    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNAUTHENTICATED = 107
    EFORBIDDEN = 108


def leaf_error(error: BaseException) -> BaseException:
    """The one exception inside nested single-exception groups (task groups wrap what their
    tasks raise), or `error` itself: what a command's main reports."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def preview(value: object, chars_max: int = 80) -> str:
    """`repr(value)` cut to `chars_max` characters: how an error message shows a value that a
    peer or a file supplied.  Never raises: a value Python cannot show (an integer of more
    digits than it turns into text, a value nested deeper than it recurses) shows as its type."""
    try:
        return repr(value)[:chars_max]
    except (ValueError, RecursionError):
        return f"<{type(value).__name__} too large to show>"


class BookieError(Exception):
    """Root of every operating error in the bookie package."""

    retryable: ClassVar[bool] = False


# --- protocol errors: who broke the protocol -------------------------------------------------


class ProtocolError(BookieError):
    """A frame or message that does not follow docs/protocol.md."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow (a caller bug or bad input)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow; the connection is dropped."""


# --- errors a bookie answers with a status ----------------------------------------------------


class StatusError(BookieError):
    """A bookie answered a request with a non-OK status."""

    status: ClassVar[Status]


class NoSuchLedger(StatusError):
    """The bookie holds nothing of this ledger (ENOLEDGER); counts as an explicit 'absent'."""

    status = Status.ENOLEDGER


class NoSuchEntry(StatusError):
    """The bookie holds the ledger but not this entry (ENOENTRY); an explicit 'absent'."""

    status = Status.ENOENTRY


class BadRequest(StatusError):
    """The request was well-framed but not acceptable (EBADREQ): wrong field value or op."""

    status = Status.EBADREQ


class BookieIOError(StatusError):
    """The bookie could not read or write its disks (EIO); try another replica."""

    status = Status.EIO
    retryable = True


class Unauthorized(StatusError):
    """The master key does not match the one stored for the ledger (EUA)."""

    status = Status.EUA


class BadVersion(StatusError):
    """The bookie does not speak this protocol version (EBADVERSION)."""

    status = Status.EBADVERSION


class Fenced(StatusError):
    """The ledger is fenced: a recovery has started, normal adds are refused (EFENCED).

    To the writer this means "outcome unknown, and you are no longer the writer".
    """

    status = Status.EFENCED


class ReadOnly(StatusError):
    """The bookie is in read-only mode (disk full) and refuses normal adds (EREADONLY)."""

    status = Status.EREADONLY
    retryable = True


class TooManyRequests(StatusError):
    """The bookie's pending-request bounds are full (ETOOMANYREQUESTS); back off and retry."""

    status = Status.ETOOMANYREQUESTS
    retryable = True


class NotAuthenticated(StatusError):
    """The bookie requires a client token and this connection has not presented one it
    knows (EUNAUTHENTICATED): the client's token is missing or wrong."""

    status = Status.EUNAUTHENTICATED


class Forbidden(StatusError):
    """The client's token does not allow this request (EFORBIDDEN): a `read` token adding,
    writing an explicit LAC or fencing."""

    status = Status.EFORBIDDEN


STATUS_ERRORS: dict[Status, type[StatusError]] = {
    cls.status: cls
    for cls in (
        NoSuchLedger,
        NoSuchEntry,
        BadRequest,
        BookieIOError,
        Unauthorized,
        BadVersion,
        Fenced,
        ReadOnly,
        TooManyRequests,
        NotAuthenticated,
        Forbidden,
    )
}


def error_for_status(status: int, message: str = "") -> StatusError:
    """The exception a client raises for a non-OK wire status (unknown codes are EBADREQ)."""
    assert status != Status.EOK
    try:
        cls = STATUS_ERRORS[Status(status)]
    except ValueError:
        return BadRequest(f"unknown status {status}: {message}")
    return cls(message or cls.status.name)


def status_for_error(error: StatusError) -> Status:
    """The wire status a server answers for an error it raised."""
    return error.status


# --- storage (bookie side) --------------------------------------------------------------------


class StorageError(BookieError):
    """The bookie's on-disk state is not usable as it is."""


class JournalCorrupt(StorageError):
    """A journal record before the tail failed its checksum: data would be skipped.

    Raised instead of silently replaying around the hole; the message names the
    file and offset.  A torn or junk *tail* is not this error: it is truncated.
    """


class EntryLogCorrupt(StorageError):
    """An entry-log record failed its checksum when read back."""


class CookieMismatch(StorageError):
    """The bookie's identity (cookie) differs between ZooKeeper and its data directories."""


class DiskFull(StorageError):
    """A write failed because the disk is full (ENOSPC)."""

    retryable = True


class StorageIOError(StorageError):
    """A write or fsync of the bookie's files failed for another reason than a full disk (EIO)."""


class StorageBusy(TooManyRequests):
    """The journal holds too many bytes not yet on disk; the mutation was refused, not applied.

    Back-pressure rather than failure: the server answers ETOOMANYREQUESTS and
    the client retries once the disk has caught up.
    """


class InvalidAddress(BookieError, ValueError):
    """Text that is not a network address (`bookie.address`); callers say what it was for."""


class HttpError(BookieError):
    """An admin HTTP request is answered `status` with this message (bookie/net/http_server.py)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class MethodNotAllowed(HttpError):
    """A known path asked with a method it does not take: 405, naming the `methods` it takes."""

    def __init__(self, path: str, methods: list[str]) -> None:
        super().__init__(405, f"{path} takes {', '.join(methods)}")
        self.methods = methods


class AdminUnavailable(BookieError):
    """The admin HTTP server cannot listen where it was told to."""


class InvalidConfig(BookieError):
    """The bookie's configuration (file or command-line flags) is not acceptable.

    The message names the offending key and says what would be accepted.
    """


# --- metadata store ---------------------------------------------------------------------------


class MetadataError(BookieError):
    """A metadata-store operation failed."""


class NoNode(MetadataError):
    """The path does not exist."""


class NodeExists(MetadataError):
    """The path already exists (create of an existing node)."""


class NotEmpty(MetadataError):
    """The node still has children (delete of a non-leaf)."""


class MetadataVersionConflict(MetadataError):
    """A compare-and-set lost: the node changed since it was read.  Re-read and retry."""

    retryable = True


class MetadataUnavailable(MetadataError):
    """The metadata service could not be reached in time; the outcome may be unknown."""

    retryable = True


class SessionExpired(MetadataError):
    """The metadata session expired: every ephemeral node of it is gone."""

    retryable = True


class BadMetadata(MetadataError):
    """A metadata value could not be decoded (wrong format or version)."""


class MetadataValueTooLarge(MetadataError):
    """A value is larger than `limits.metadata_value_bytes_max`; nothing was written."""


# --- ledger client ----------------------------------------------------------------------------


class ClientError(BookieError):
    """An error raised by the ledger client to its caller."""


class BookieUnavailable(ClientError):
    """A bookie could not be reached, or did not answer in time."""

    retryable = True


class ClientTimeout(ClientError):
    """The operation did not complete within its deadline; its outcome is unknown."""

    retryable = True


class NotEnoughBookies(ClientError):
    """Placement could not find enough writable bookies for the ensemble or a replacement."""

    retryable = True


class LedgerClosed(ClientError):
    """The ledger is closed (by its writer or a recovery); no more adds are possible."""


class LedgerFenced(ClientError):
    """This writer was fenced by a recovery; no acknowledgement is possible any more.

    Adds that were pending when it happened have an unknown outcome: a reader
    must look at the recovered ledger to learn whether they made it.
    """


class NoSuchLedgerError(ClientError):
    """The ledger's metadata does not exist."""


class UnauthorizedLedgerAccess(ClientError):
    """The password does not match the ledger's."""


class DigestMismatch(ClientError):
    """An entry read back failed its digest check on every replica that answered."""

    retryable = True


class EntryNotAvailable(ClientError):
    """No replica could serve the entry (all errors or timeouts, none said 'absent')."""

    retryable = True


class ReadBeyondLastAddConfirmed(ClientError):
    """A read asked for entries past the last add confirmed without asking for unconfirmed."""


class RecoveryFailed(ClientError):
    """Recovery could not decide the ledger's end (too few bookies answered); it stays
    IN_RECOVERY and may be retried."""

    retryable = True


class WriterNotConfirmed(ClientError):
    """Not enough bookies answered to prove this writer still owns its ledger, or its
    ensemble changed meanwhile; nothing is known either way.  Try again."""

    retryable = True


class InvalidLedgerConfig(ClientError):
    """Ensemble / write quorum / ack quorum or another create option is not acceptable."""


class UnexpectedMetadataChange(ClientError):
    """The ledger's metadata changed under an operation in a way it cannot reconcile
    (another client changed the ensembles); the operation must start over from a fresh read."""

    retryable = True


class TooManyEnsembleChanges(ClientError):
    """A write handle replaced bookies `ensemble_changes_max` times; it gives up writing."""


class AppendWindowFull(ClientError):
    """`append_nowait` found `outstanding_adds_max` adds pending; nothing was appended.

    Wait for capacity (`WriteHandle.wait_for_capacity`) and append again.
    """

    retryable = True


class InvalidEntryRange(ClientError):
    """A read asked for a negative entry id or a range whose last entry precedes its first."""


class ClientClosed(ClientError):
    """The ledger client was closed: its handles can do nothing more, and what was pending
    has an unknown outcome."""


class RereplicationFailed(ClientError):
    """A replication worker could not bring a ledger back to full replication this time (no
    spare bookie, no readable copy of an entry, no configured password, an open ledger); the
    ledger stays marked under-replicated and is tried again later.  Nothing was half-changed:
    the metadata changes only by a whole compare-and-set per segment."""

    retryable = True
