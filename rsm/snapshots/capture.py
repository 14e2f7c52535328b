"""Capturing a consistent state at an exact index without holding up apply for the write.

`capture` starts between two applies (apply has no await, so the state is
exactly the one after the replica's applied position) and hands back the
snapshot's chunk payloads as an async stream, to be written to the snapshot
ledger while the replica goes on applying.  Two strategies:

* **fork** (the default on POSIX, as Redis and PySyncObj do): the replica
  forks; the child holds a copy-on-write image of the state at that instant,
  serializes it (`stream_snapshot`) into a pipe and leaves with `os._exit`;
  the parent goes on applying at once and reads the pipe without blocking the
  loop.  The pause is the `fork()` call itself (copying page tables: about a
  millisecond per few hundred MB of heap), reported as `pause_ms`.  The child
  touches nothing but the state, the session table and the pipe: no event
  loop, no ZooKeeper client, no logging (their locks may have been held by
  another thread at the fork), no exit handlers.  Pages the parent writes
  meanwhile are copied by the kernel, so memory grows by what changes during
  the write (Python's reference counts make every object the child reads
  count as written, too: budget up to the size of the state).  The parent
  freezes its garbage collector's generations for the child's lifetime so
  that collections do not dirty every page.
* **inline** (for the simulation, and platforms without `fork`): the whole
  stream is produced on the loop, between two applies, into memory, then
  written.  Apply waits for the serialization (the pause, reported), not for
  the write; memory holds the serialized snapshot once.

Both produce exactly the same bytes (`stream_snapshot`), and end with a
`CaptureResult`: the stream's summary and the state hash at the index.  Both
turn an exception of the application's `snapshot()` or `state_hash()` into
`BadSnapshotState` (naming its type and text), which the replica logs and
survives.

Pipe framing (child -> parent), each frame `kind u8 | length u32 | body`:
kind 0 a chunk payload, 1 the result (CBOR `[chunk_count, size_bytes,
content_sha256, state_sha256, state_hash]`), 2 an error (UTF-8 text).  The
child exits 0 after the result, 1 after an error.

Invariants: a capture yields the chunks of one state, at one index; the
child never returns into the caller's code; every child is reaped, killed
first if the parent stops reading.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import struct
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Final

import anyio
import cbor2

from rsm import limits
from rsm.core.sessions import SessionTable
from rsm.core.snapshot_format import (
    SnapshotHeader,
    SnapshotWriter,
    StreamSummary,
    framework_records,
)
from rsm.core.state_machine import StateMachine
from rsm.errors import BadSnapshotState, SnapshotCorrupt

FORK: Final = "fork"
INLINE: Final = "inline"

_FRAME_HEAD: Final = struct.Struct(">BI")
_FRAME_CHUNK: Final = 0
_FRAME_RESULT: Final = 1
_FRAME_ERROR: Final = 2
_PIPE_READ_BYTES: Final = 1 << 20
_CHILD_FAILED: Final = 1


@dataclass(frozen=True, slots=True)
class CaptureResult:
    summary: StreamSummary
    state_hash: bytes


def uses_default_hash(machine: StateMachine) -> bool:
    """Whether `state_hash` is the default one, the SHA-256 of `snapshot()`'s bytes: then the
    stream's own state digest is the hash, and nothing is serialized twice."""
    return type(machine).state_hash is StateMachine.state_hash


def stream_snapshot(
    machine: StateMachine, header: SnapshotHeader, sessions: SessionTable, chunk_bytes: int
) -> Iterator[bytes | CaptureResult]:
    """The snapshot's chunk payloads, then its `CaptureResult` as the last item.

    Reads the state lazily: the caller must keep it still until the result
    came (a fork's child, or the loop not yielding).
    """
    writer = SnapshotWriter(chunk_bytes)
    for record in framework_records(header, sessions.plain_sessions()):
        yield from writer.framework(record)
    for piece in machine.snapshot():
        if not isinstance(piece, bytes | bytearray | memoryview):
            raise BadSnapshotState(
                f"snapshot() yielded a {type(piece).__name__}; it must yield bytes"
            )
        if piece:
            yield from writer.state(piece)
    chunks, summary = writer.finish()
    yield from chunks
    if uses_default_hash(machine):
        state_hash = summary.state_sha256
    else:
        state_hash = machine.state_hash()
        if type(state_hash) is not bytes or not 1 <= len(state_hash) <= limits.state_hash_bytes_max:
            raise BadSnapshotState(
                f"state_hash() returned {state_hash!r:.40}, not "
                f"1..{limits.state_hash_bytes_max} bytes"
            )
    yield CaptureResult(summary, state_hash)


class Capture:
    """A capture under way: iterate `payloads()`, then read `result`."""

    def __init__(self, payloads: AsyncIterator[bytes | CaptureResult], pause_ms: float) -> None:
        self._source = payloads
        self.pause_ms = pause_ms
        """How long apply was held for the capture (the fork, or the whole inline stream)."""
        self.result: CaptureResult | None = None

    async def payloads(self) -> AsyncIterator[bytes]:
        async for item in self._source:
            if isinstance(item, CaptureResult):
                self.result = item
                return
            yield item
        raise SnapshotCorrupt("the capture ended without its result")


@contextlib.asynccontextmanager
async def capture(
    strategy: str,
    machine: StateMachine,
    header: SnapshotHeader,
    sessions: SessionTable,
    chunk_bytes: int,
) -> AsyncIterator[Capture]:
    """Capture the state now (no await before it is captured); see the module docstring."""
    assert strategy in (FORK, INLINE)
    if strategy == INLINE:
        started_s = anyio.current_time()
        try:
            items = list(stream_snapshot(machine, header, sessions, chunk_bytes))
        except BadSnapshotState:
            raise
        except Exception as error:
            # The application's snapshot() or state_hash() raised: the same error as a fork
            # child's, so the replica logs it and goes on.
            raise BadSnapshotState(
                f"the application's snapshot() or state_hash() raised "
                f"{type(error).__name__}: {error}"
            ) from error
        yield Capture(_replay(items), (anyio.current_time() - started_s) * 1000)
        return
    async with _forked(lambda: stream_snapshot(machine, header, sessions, chunk_bytes)) as (
        source,
        pause_ms,
    ):
        yield Capture(source, pause_ms)


def fork_available() -> bool:
    return hasattr(os, "fork")


async def _replay(items: list[bytes | CaptureResult]) -> AsyncIterator[bytes | CaptureResult]:
    for item in items:
        yield item


# --- fork -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _forked(
    make_stream: Callable[[], Iterator[bytes | CaptureResult]],
) -> AsyncIterator[tuple[AsyncIterator[bytes | CaptureResult], float]]:
    read_fd, write_fd = os.pipe()
    gc.freeze()
    started_s = anyio.current_time()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns that a multi-threaded process forks (kazoo runs
            # threads); the child only serializes the state and exits.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        gc.unfreeze()
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:  # pragma: no cover - the child; it reports through the pipe
        _child(read_fd, write_fd, make_stream)
    pause_ms = (anyio.current_time() - started_s) * 1000
    os.close(write_fd)
    try:
        os.set_blocking(read_fd, False)
        yield _read_frames(read_fd), pause_ms
    finally:
        with anyio.CancelScope(shield=True):
            os.close(read_fd)
            _reap(pid)
            gc.unfreeze()


def _child(
    read_fd: int, write_fd: int, make_stream: Callable[[], Iterator[bytes | CaptureResult]]
) -> None:  # pragma: no cover - runs in the forked child
    code = _CHILD_FAILED
    try:
        # A signal meant for the parent's group must not reach the parent's event
        # loop through the wakeup fd the child shares with it.  (Only possible when
        # the fork came from the main thread; otherwise no handler was installed.)
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
        gc.disable()
        os.close(read_fd)
        for item in make_stream():
            if isinstance(item, CaptureResult):
                summary = item.summary
                body = cbor2.dumps(
                    [
                        summary.chunk_count,
                        summary.size_bytes,
                        summary.content_sha256,
                        summary.state_sha256,
                        item.state_hash,
                    ]
                )
                _write_all(write_fd, _FRAME_HEAD.pack(_FRAME_RESULT, len(body)) + body)
            else:
                _write_all(write_fd, _FRAME_HEAD.pack(_FRAME_CHUNK, len(item)))
                _write_all(write_fd, item)
        code = 0
    except BaseException as error:
        with contextlib.suppress(BaseException):
            text = f"{type(error).__name__}: {error}".encode(errors="replace")
            _write_all(write_fd, _FRAME_HEAD.pack(_FRAME_ERROR, len(text)) + text)
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:  # pragma: no cover - runs in the forked child
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


async def _read_frames(fd: int) -> AsyncIterator[bytes | CaptureResult]:
    """The child's frames, decoded, as they arrive; the loop never blocks on the pipe."""
    buffer = bytearray()
    head_bytes = _FRAME_HEAD.size
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, _PIPE_READ_BYTES)
        except BlockingIOError:
            continue
        if not data:
            break
        buffer += data
        offset = 0
        while len(buffer) - offset >= head_bytes:
            kind, length = _FRAME_HEAD.unpack_from(buffer, offset)
            end = offset + head_bytes + length
            if len(buffer) < end:
                break
            body = bytes(buffer[offset + head_bytes : end])
            offset = end
            if kind == _FRAME_CHUNK:
                yield body
            elif kind == _FRAME_RESULT:
                yield _decode_result(body)
            else:
                text = body.decode(errors="replace")
                raise BadSnapshotState(f"the snapshot child failed: {text}")
        del buffer[:offset]
    if buffer:
        raise SnapshotCorrupt(f"the snapshot child's output ends inside a frame ({len(buffer)} B)")


def _decode_result(body: bytes) -> CaptureResult:
    chunk_count, size_bytes, content_sha256, state_sha256, state_hash = cbor2.loads(body)
    return CaptureResult(
        StreamSummary(chunk_count, size_bytes, content_sha256, state_sha256), state_hash
    )


def _reap(pid: int) -> None:
    """Wait for the child; kill it first if it still runs (the parent stopped reading)."""
    done, _status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
