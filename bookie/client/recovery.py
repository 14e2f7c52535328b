"""Open with recovery: the async shell around `bookie.core.recovery.Recovery`.

Step 0 (mark) is a metadata CAS loop here: `mark_in_recovery_transform` moves
an OPEN ledger to IN_RECOVERY; from then on its writer can change nothing in
the metadata (an ensemble change or close of its raises `LedgerFenced`).
Everything after is the core's (docs/ledgers.md, "Recovery, step by step", and
the core's docstring); this shell carries out its effects:

* `SendRead` (fencing reads of the last entry, then fencing recovery reads,
  then possibly one plain read) and `SendAdd` (recovery adds, encoded once per
  entry) through the client's connections, answers fed back;
* `ChooseReplacements`: placement over the writable bookies, excluding every
  bookie that failed this recovery; nothing is written yet;
* `CloseRecovered`: the CAS loop with `recovery_close_transform`, which also
  writes the segments of the bookies recovery replaced.  A record found CLOSED
  there is adopted, which is how concurrent recoverers converge.

`recover` returns the closed metadata or raises the error that stopped
recovery: `RecoveryFailed` (too few bookies answered to decide; the ledger
stays IN_RECOVERY and a later open retries), `UnauthorizedLedgerAccess`,
`NotEnoughBookies`, or a metadata error of the CAS.
"""

from __future__ import annotations

from functools import partial

from bookie.client.context import ClientContext
from bookie.client.dispatch import send_adds, send_read
from bookie.core.metadata import (
    LedgerMetadata,
    mark_in_recovery_transform,
    recovery_close_transform,
)
from bookie.core.placement import choose_replacements
from bookie.core.reader import SendRead
from bookie.core.recovery import (
    ChooseReplacements,
    CloseRecovered,
    Recovery,
    RecoveryAborted,
    RecoveryFinished,
)
from bookie.core.writer import SendAdd
from bookie.errors import BookieError, NotEnoughBookies
from bookie.wire.messages import AddResponse, ReadResponse, Response
from bookie.wire.packet import Digest, master_key


async def recover(
    context: ClientContext, ledger_id: int, password: bytes
) -> tuple[LedgerMetadata, int]:
    """Recover ledger `ledger_id` (a no-op for a closed one); return its closed metadata
    and that metadata's version.  Raises as the module docstring says."""
    marked, version = await context.ledgers.update(ledger_id, mark_in_recovery_transform)
    if marked.is_closed:
        return marked, version
    context.stats.recoveries += 1
    return await _RecoveryRun(context, marked, version, password).run()


class _RecoveryRun:
    """One recovery of one ledger: the core, and the effects it asks for."""

    def __init__(
        self, context: ClientContext, metadata: LedgerMetadata, version: int, password: bytes
    ) -> None:
        config = context.config
        self._context = context
        self._metadata = metadata
        self._version = version
        self._master_key = master_key(password)
        self._core = Recovery(
            metadata,
            Digest(metadata.digest_type, password),
            read_batch_max=config.recovery_read_batch_max,
            ensemble_changes_max=config.ensemble_changes_max,
        )
        self._excluded: set[str] = set()
        """Bookies that failed this recovery: never chosen as replacements."""
        self._close: CloseRecovered | None = None
        """The close CAS the core asked for, to run in `run`'s task."""
        self._outcome: RecoveryFinished | RecoveryAborted | None = None
        self._wakeup = context.pool.wakeup()

    async def run(self) -> tuple[LedgerMetadata, int]:
        self._core.start()
        self._carry_out()
        while self._outcome is None:
            self._context.pool.check_open()
            close = self._close
            if close is None:
                # Every read and add has a timeout, so some answer always comes.
                await self._wakeup.wait(None)
                continue
            self._close = None
            await self._close_metadata(close)
        if isinstance(self._outcome, RecoveryAborted):
            raise self._outcome.error
        return self._outcome.metadata, self._version

    def _carry_out(self) -> None:
        context = self._context
        config = context.config
        core = self._core
        ledger_id = self._metadata.ledger_id
        while effects := core.take_effects():
            for effect in effects:
                if isinstance(effect, SendRead):
                    send_read(
                        context.pool,
                        effect,
                        ledger_id=ledger_id,
                        master_key=self._master_key,
                        on_response=partial(
                            self._on_read_answer, effect.bookie_id, effect.entry_id
                        ),
                        read_timeout_ms=config.read_timeout_ms,
                    )
                elif isinstance(effect, SendAdd):
                    send_adds(
                        context.pool,
                        effect,
                        ledger_id=ledger_id,
                        master_key=self._master_key,
                        on_answer=self._on_add_answer,
                        timeout_ms=config.add_timeout_ms,
                    )
                elif isinstance(effect, ChooseReplacements):
                    self._choose_replacements(effect)
                elif isinstance(effect, CloseRecovered):
                    self._close = effect
                else:
                    self._outcome = effect
        self._wakeup.set()

    def _choose_replacements(self, effect: ChooseReplacements) -> None:
        context = self._context
        self._excluded.update(effect.failed.values())
        try:
            replacements = choose_replacements(
                context.registry.writable,
                effect.ensemble,
                list(effect.failed),
                write_quorum=self._metadata.write_quorum,
                rng=context.rng,
                excluded=self._excluded,
            )
        except NotEnoughBookies as error:
            self._core.on_replacements_failed(error)
        else:
            self._core.on_replacements(replacements)

    def _on_read_answer(
        self, bookie_id: str, entry_id: int, outcome: Response | BookieError
    ) -> None:
        if type(outcome) is ReadResponse:
            self._core.on_read_response(bookie_id, entry_id, outcome)
        else:
            self._core.on_read_timeout(bookie_id, entry_id)
        self._carry_out()

    def _on_add_answer(
        self, bookie_id: str, entry_id: int, outcome: Response | BookieError
    ) -> None:
        if type(outcome) is AddResponse:
            self._core.on_add_response(bookie_id, entry_id, outcome.status)
        else:
            self._core.on_add_timeout(bookie_id, entry_id)
        self._carry_out()

    async def _close_metadata(self, effect: CloseRecovered) -> None:
        try:
            metadata, version = await self._context.ledgers.update(
                self._metadata.ledger_id,
                lambda current: recovery_close_transform(
                    current,
                    effect.started_ensembles,
                    effect.recovered_ensembles,
                    effect.last_entry_id,
                    effect.length,
                ),
            )
        except BookieError as error:
            self._core.on_close_failed(error)
        else:
            self._version = version
            self._core.on_closed(metadata)
        self._carry_out()
