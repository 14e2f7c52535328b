"""Where each piece of cluster metadata lives: the znode path scheme, and its inverse.

Pure.  Everything sits under one cluster root R (default
`limits.metadata_root_default`, "/ledgers"), laid out as BookKeeper does so an
operator who knows one knows the other::

    R/INSTANCEID                            cluster id (text), embedded in cookies
    R/available/<bookie-id>                 ephemeral: a writable bookie is up
    R/available/readonly/<bookie-id>        ephemeral: a read-only bookie is up
    R/cookies/<bookie-id>                   a bookie's identity (bookies.Cookie)
    R/idgen                                 the ledger id counter (ledgers.py)
    R/00/0000/L0001                         ledger 1's metadata: ids < 10^10
    R/000/0000/0100/0000/L0000              ledger 10^10's metadata: larger ids
    R/underreplication/ledgers/0000/0000/0000/0001/urL0000000001
    R/underreplication/locks/urL0000000001
    R/underreplication/auditorelection
    R/underreplication/disable              present: replication workers pause
    R/underreplication/triggeraudit         present: the auditor audits now

Ledger paths.  An id below 10^10 is written as 10 decimal digits split 2/4/4
(`00/0000/L0001`), so no znode has more than 10,000 children, which keeps
child listings small (ZooKeeper answers a listing in one packet).  Larger ids,
up to `limits.ledger_id_max`, use 19 digits split 3/4/4/4/4.  The two forms
cannot be confused: their top-level directories have 2 and 3 digits.

Invariants:

* `ledger_id_of(ledger_path(i)) == i` for every valid id, and `ledger_id_of`
  answers None for any other path, including a non-canonical spelling of an id
  (an id below 10^10 in the long form): each ledger has exactly one path, so a
  listing can never count a ledger twice or miss one stored where `read` looks.
* No ledger path collides with the other names under R (those are not digits).
* `underreplicated_ledger_id_of_parts` inverts `underreplicated_ledger` the same
  way: one canonical path per ledger, None for anything else.
* Bookie ids are valid znode names and never "readonly", which would collide
  with the read-only directory under `available/`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from bookie import limits
from bookie.meta import paths

READONLY_DIRECTORY: Final = "readonly"
"""Name of the read-only bookies' directory under `available/`."""

LEDGER_LEAF_PREFIX: Final = "L"
UNDERREPLICATED_PREFIX: Final = "urL"


@dataclass(frozen=True, slots=True)
class _LedgerForm:
    """One way of spelling ledger ids as paths: total digits, and how they are split."""

    digits: int
    widths: tuple[int, ...]
    ids_min: int
    ids_max: int

    def parts(self, ledger_id: int) -> tuple[str, ...]:
        text = f"{ledger_id:0{self.digits}d}"
        assert len(text) == self.digits
        parts: list[str] = []
        offset = 0
        for width in self.widths:
            parts.append(text[offset : offset + width])
            offset += width
        parts[-1] = LEDGER_LEAF_PREFIX + parts[-1]
        return tuple(parts)


_SHORT: Final = _LedgerForm(digits=10, widths=(2, 4, 4), ids_min=0, ids_max=10**10 - 1)
_LONG: Final = _LedgerForm(
    digits=19, widths=(3, 4, 4, 4, 4), ids_min=10**10, ids_max=limits.ledger_id_max
)
_FORMS: Final = (_SHORT, _LONG)

assert sum(_SHORT.widths) == _SHORT.digits
assert sum(_LONG.widths) == _LONG.digits
assert len(str(limits.ledger_id_max)) == _LONG.digits
assert _SHORT.widths[0] != _LONG.widths[0], "top-level directories tell the forms apart"


class LedgerNodeKind(enum.Enum):
    """What a child found while walking the ledger hierarchy is."""

    DIRECTORY = "directory"
    LEDGER = "ledger"


def _is_digits(text: str, width: int) -> bool:
    return len(text) == width and text.isascii() and text.isdigit()


def _form_of(top: str) -> _LedgerForm | None:
    for form in _FORMS:
        if _is_digits(top, form.widths[0]):
            return form
    return None


def ledger_child_kind(prefix: tuple[str, ...], name: str) -> LedgerNodeKind | None:
    """What `name`, a child of the ledger directory `prefix` (names below the root, () for the
    root itself), is: a directory to descend into, a ledger, or None (anything else)."""
    form = _form_of(prefix[0] if prefix else name)
    if form is None:
        return None
    depth = len(prefix)
    for level, part in enumerate(prefix):
        if not _is_digits(part, form.widths[level]):
            return None
    if depth < len(form.widths) - 1:
        return LedgerNodeKind.DIRECTORY if _is_digits(name, form.widths[depth]) else None
    if depth == len(form.widths) - 1:
        return LedgerNodeKind.LEDGER if ledger_id_of_parts((*prefix, name)) is not None else None
    return None


def ledger_id_of_parts(parts: tuple[str, ...]) -> int | None:
    """The ledger id whose canonical path below the root is `parts`, or None."""
    if not parts:
        return None
    form = _form_of(parts[0])
    if form is None or len(parts) != len(form.widths):
        return None
    leaf = parts[-1]
    if not leaf.startswith(LEDGER_LEAF_PREFIX):
        return None
    digits = [*parts[:-1], leaf[len(LEDGER_LEAF_PREFIX) :]]
    if not all(_is_digits(part, width) for part, width in zip(digits, form.widths, strict=True)):
        return None
    ledger_id = int("".join(digits))
    if not form.ids_min <= ledger_id <= form.ids_max:
        return None
    return ledger_id


def ledger_parts(ledger_id: int) -> tuple[str, ...]:
    """The names, below the root, of the path of ledger `ledger_id`."""
    assert 0 <= ledger_id <= limits.ledger_id_max, ledger_id
    form = _SHORT if ledger_id <= _SHORT.ids_max else _LONG
    parts = form.parts(ledger_id)
    assert ledger_id_of_parts(parts) == ledger_id
    return parts


UNDERREPLICATED_LEVELS: Final = 4
"""Directory levels above an under-replication mark: 16 hex digits of the id, 4 per level."""


def _is_hex_level(text: str) -> bool:
    return len(text) == 4 and all(character in "0123456789abcdef" for character in text)


def underreplicated_parts(ledger_id: int) -> tuple[str, ...]:
    """The names, below `R/underreplication/ledgers`, of ledger `ledger_id`'s mark."""
    assert 0 <= ledger_id <= limits.ledger_id_max, ledger_id
    text = f"{ledger_id:016x}"
    levels = tuple(text[offset : offset + 4] for offset in range(0, 16, 4))
    return (*levels, f"{UNDERREPLICATED_PREFIX}{ledger_id:010d}")


def underreplicated_child_kind(prefix: tuple[str, ...], name: str) -> LedgerNodeKind | None:
    """What `name`, a child of the mark directory `prefix` (names below
    `R/underreplication/ledgers`), is: a directory, a mark, or None (anything else)."""
    if len(prefix) > UNDERREPLICATED_LEVELS or not all(map(_is_hex_level, prefix)):
        return None
    if len(prefix) < UNDERREPLICATED_LEVELS:
        return LedgerNodeKind.DIRECTORY if _is_hex_level(name) else None
    found = underreplicated_ledger_id_of_parts((*prefix, name))
    return LedgerNodeKind.LEDGER if found is not None else None


def underreplicated_ledger_id_of_parts(parts: tuple[str, ...]) -> int | None:
    """The ledger whose mark's canonical path below `R/underreplication/ledgers` is `parts`."""
    if len(parts) != UNDERREPLICATED_LEVELS + 1:
        return None
    leaf = parts[-1]
    digits = leaf[len(UNDERREPLICATED_PREFIX) :]
    if not (leaf.startswith(UNDERREPLICATED_PREFIX) and digits.isascii() and digits.isdigit()):
        return None
    ledger_id = int(digits)
    if ledger_id > limits.ledger_id_max or underreplicated_parts(ledger_id) != parts:
        return None
    return ledger_id


def check_bookie_id(bookie_id: str) -> None:
    """Assert `bookie_id` can name a registration and a cookie (ids come from configuration,
    which the server validates; reaching here with a bad one is a programmer error)."""
    assert paths.is_valid_name(bookie_id), f"invalid bookie id {bookie_id!r}"
    assert bookie_id != READONLY_DIRECTORY, "a bookie id may not be 'readonly'"


@dataclass(frozen=True, slots=True)
class MetadataLayout:
    """The paths of one cluster, rooted at `root`."""

    root: str = limits.metadata_root_default

    def __post_init__(self) -> None:
        paths.check_path(self.root)

    @property
    def instance_id(self) -> str:
        return paths.join(self.root, "INSTANCEID")

    @property
    def available(self) -> str:
        """Directory of writable bookies' registrations (and of `available_readonly`)."""
        return paths.join(self.root, "available")

    @property
    def available_readonly(self) -> str:
        return paths.join(self.root, "available", READONLY_DIRECTORY)

    def registration(self, bookie_id: str, *, read_only: bool) -> str:
        """Path of a bookie's ephemeral registration znode."""
        check_bookie_id(bookie_id)
        directory = self.available_readonly if read_only else self.available
        return paths.join(directory, bookie_id)

    @property
    def cookies(self) -> str:
        return paths.join(self.root, "cookies")

    def cookie(self, bookie_id: str) -> str:
        check_bookie_id(bookie_id)
        return paths.join(self.cookies, bookie_id)

    @property
    def idgen(self) -> str:
        return paths.join(self.root, "idgen")

    def ledger(self, ledger_id: int) -> str:
        """Path of ledger `ledger_id`'s metadata znode."""
        return paths.join(self.root, *ledger_parts(ledger_id))

    def ledger_directory(self, prefix: tuple[str, ...]) -> str:
        """Path of a directory of the ledger hierarchy (`prefix` as in `ledger_child_kind`)."""
        return paths.join(self.root, *prefix)

    def ledger_id_of(self, path: str) -> int | None:
        """The ledger whose metadata lives at `path`, or None if `path` is not a ledger's."""
        paths.check_path(path)
        if path == self.root or not path.startswith(self.root.rstrip("/") + "/"):
            return None
        relative = paths.relative_to(self.root, path)
        return ledger_id_of_parts(tuple(relative[1:].split("/")))

    @property
    def underreplication(self) -> str:
        return paths.join(self.root, "underreplication")

    @property
    def underreplicated_ledgers(self) -> str:
        return paths.join(self.underreplication, "ledgers")

    def underreplicated_ledger(self, ledger_id: int) -> str:
        """Path of the mark that asks for ledger `ledger_id` to be re-replicated: 16 hex digits
        of the id split 4/4/4/4, then `urL` and the id in at least 10 decimal digits."""
        return paths.join(self.underreplicated_ledgers, *underreplicated_parts(ledger_id))

    def underreplicated_directory(self, prefix: tuple[str, ...]) -> str:
        """Path of a directory of the marks' hierarchy (`prefix` as in
        `underreplicated_child_kind`)."""
        return paths.join(self.underreplicated_ledgers, *prefix)

    @property
    def underreplication_locks(self) -> str:
        return paths.join(self.underreplication, "locks")

    def underreplication_lock(self, ledger_id: int) -> str:
        """Path of the ephemeral lock a replication worker holds while it works on a ledger."""
        assert 0 <= ledger_id <= limits.ledger_id_max, ledger_id
        return paths.join(self.underreplication_locks, self._underreplicated_name(ledger_id))

    @property
    def auditor_election(self) -> str:
        return paths.join(self.underreplication, "auditorelection")

    @property
    def audit_trigger(self) -> str:
        """Present: the auditor audits at once, then removes it (`triggeraudit`)."""
        return paths.join(self.underreplication, "triggeraudit")

    @property
    def underreplication_disable(self) -> str:
        """Present: replication workers stop taking marks (`autorecovery disable`)."""
        return paths.join(self.underreplication, "disable")

    @staticmethod
    def _underreplicated_name(ledger_id: int) -> str:
        return f"{UNDERREPLICATED_PREFIX}{ledger_id:010d}"
