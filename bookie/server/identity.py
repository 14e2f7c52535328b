"""A bookie's identity at start-up: cookies in ZooKeeper and in every data directory.

Why.  A bookie must never serve data it does not have.  If a ledger disk was
replaced or wiped, or the configuration points at other directories, or at
another cluster, a bookie that started anyway would answer "no such entry"
for entries it acknowledged before, and a ledger recovery counting those
answers could cut acknowledged entries off.  So the bookie's identity, a
`bookies.Cookie` (cluster instance id, bookie id, advertised address, journal
directory, ledger directories), is kept in ZooKeeper (`<root>/cookies/<id>`)
and in a `COOKIE` file in the journal directory and in each ledger directory,
and every start compares them with each other and with the configuration.

Rules (`plan_identity`, pure; the first matching problem set refuses):

1. A directory whose cookie names another bookie or another cluster instance
   refuses: wrong path, wrong `bookie_id`, or wrong `zk_servers`/`zk_root`.
2. No cookie in ZooKeeper: if no directory holds data, this is a first start
   (or one interrupted before it finished): write every cookie.  If some
   directory holds data, refuse: the cookie was deleted or this is another
   ZooKeeper.
3. A cookie in ZooKeeper: the configured journal and ledger directories must
   be the ones it lists (ledgers are placed by `ledger_id % len(ledger_dirs)`,
   so another list would hide data).  Every directory must have a cookie equal
   to ZooKeeper's: a missing one means a new or wiped disk.
4. Only the advertised address changed (the bookie id stayed, so it was set
   explicitly): the cookies are rewritten with the new address, ZooKeeper first.

Writes are ordered so a crash between any two leaves a state the next start
accepts: on a first start the directories are written before ZooKeeper (rule
2 then sees no data and writes again); on an address change ZooKeeper goes
first (rule 4 then rewrites the directories).  A cookie file is replaced
atomically (temporary file, fsync, rename, fsync of the directory).

Format of a `COOKIE` file: exactly the bytes of `Cookie.encode()` (one
canonical CBOR map, documented in bookie/meta/bookies.py), so a file and the
znode can be compared byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import anyio.to_thread

from bookie.errors import BadMetadata, CookieMismatch
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import Cookie, read_cookie, write_cookie
from bookie.meta.layout import MetadataLayout

COOKIE_FILE: Final = "COOKIE"
_COOKIE_TEMPORARY: Final = "COOKIE.tmp"
_NOT_DATA: Final = frozenset({COOKIE_FILE, _COOKIE_TEMPORARY, "lost+found"})
"""Directory entries that do not make a directory 'hold data'."""


@dataclass(frozen=True, slots=True)
class DirectoryState:
    """What one data directory holds, as far as identity is concerned."""

    path: str
    role: str
    """'journal dir', 'ledger dir' or 'journal and ledger dir', for messages."""
    cookie: Cookie | None
    has_data: bool
    unreadable: str | None = None
    """Why the cookie file exists but could not be read, if so."""


@dataclass(frozen=True, slots=True)
class IdentityPlan:
    """What to write before the bookie may start (nothing when everything matches)."""

    write_zk: bool
    zk_version: int | None
    """The version to replace (None: create) when `write_zk`."""
    write_dirs: tuple[str, ...]
    zk_first: bool
    note: str | None
    """Why something is written, for the log (None when nothing is)."""


def plan_identity(
    expected: Cookie,
    zk: tuple[Cookie, int] | None,
    dirs: Sequence[DirectoryState],
    *,
    zk_path: str,
    cluster: str,
) -> IdentityPlan:
    """Apply the rules of the module docstring; raises `CookieMismatch` with every problem.

    `expected` is the cookie the configuration describes; `zk` the cookie
    found at `zk_path` and its version; `cluster` names the ZooKeeper cluster
    for messages ("127.0.0.1:2181 /ledgers").
    """
    problems = _foreign_directories(expected, dirs, cluster)
    if problems:
        raise _refusal(expected, problems)
    if zk is None:
        with_data = [state for state in dirs if state.has_data]
        if with_data:
            listed = _listing(with_data)
            raise _refusal(
                expected,
                [
                    f"ZooKeeper ({cluster}) has no cookie for this bookie at {zk_path}, but "
                    f"its directories hold data ({listed}).  The cookie was deleted, or "
                    "zk_servers/zk_root point at another cluster.  If the cluster is right "
                    "and the bookie was decommissioned on purpose, empty these directories "
                    "to start it as a new bookie; otherwise fix zk_servers/zk_root."
                ],
            )
        return IdentityPlan(
            write_zk=True,
            zk_version=None,
            write_dirs=tuple(state.path for state in dirs),
            zk_first=False,
            note="first start: cookies written",
        )
    zk_cookie, zk_version = zk
    problems = _changed_directories(expected, zk_cookie, zk_path)
    problems += _directory_problems(dirs, zk_cookie, zk_path)
    if problems:
        raise _refusal(expected, problems)
    address = expected.advertised_address
    old_addresses = [
        cookie.advertised_address
        for cookie in (zk_cookie, *(state.cookie for state in dirs))
        if cookie is not None and cookie.advertised_address != address
    ]
    if not old_addresses:
        return IdentityPlan(False, zk_version, (), zk_first=True, note=None)
    return IdentityPlan(
        write_zk=zk_cookie.advertised_address != address,
        zk_version=zk_version,
        write_dirs=tuple(state.path for state in dirs),
        zk_first=True,
        note=f"advertised address changed from {old_addresses[0]} to {address}",
    )


def _foreign_directories(
    expected: Cookie, dirs: Sequence[DirectoryState], cluster: str
) -> list[str]:
    problems = []
    # Directories with the same foreign owner share one explanation.
    other_bookies: dict[str, list[DirectoryState]] = {}
    other_clusters: dict[str, list[DirectoryState]] = {}
    for state in dirs:
        cookie = state.cookie
        if state.unreadable is not None:
            problems.append(
                f"{state.role} {state.path}: its {COOKIE_FILE} file cannot be read "
                f"({state.unreadable}).  Every directory of a bookie holds the same cookie: "
                f"copy {COOKIE_FILE} from another directory of this bookie."
            )
        elif cookie is not None and cookie.bookie_id != expected.bookie_id:
            other_bookies.setdefault(cookie.bookie_id, []).append(state)
        elif cookie is not None and cookie.instance_id != expected.instance_id:
            other_clusters.setdefault(cookie.instance_id, []).append(state)
    for bookie_id, states in other_bookies.items():
        problems.append(
            f"{_listing(states)} belong to bookie {bookie_id!r}, not {expected.bookie_id!r}.  "
            f'If this bookie\'s address changed, set bookie_id = "{bookie_id}" to keep its '
            "identity; if the directories are another bookie's, fix the paths."
        )
    for instance_id, states in other_clusters.items():
        problems.append(
            f"{_listing(states)} belong to cluster instance {instance_id}, but the cluster "
            f"at {cluster} is instance {expected.instance_id}.  Check zk_servers and "
            "zk_root; to move this bookie to that cluster, empty its directories first "
            "(their data belongs to the old cluster)."
        )
    return problems


def _listing(states: Sequence[DirectoryState]) -> str:
    return ", ".join(f"{state.role} {state.path}" for state in states)


def _changed_directories(expected: Cookie, zk_cookie: Cookie, zk_path: str) -> list[str]:
    problems = []
    if expected.instance_id != zk_cookie.instance_id:
        problems.append(
            f"the cookie at {zk_path} names cluster instance {zk_cookie.instance_id}, but the "
            f"cluster's instance id is {expected.instance_id}: the cluster's INSTANCEID was "
            "replaced.  Restore it, or treat every bookie of the cluster as new."
        )
    if expected.journal_dir != zk_cookie.journal_dir:
        problems.append(
            f"journal_dir is {expected.journal_dir} in the configuration, but this bookie was "
            f"created with {zk_cookie.journal_dir} (cookie at {zk_path}).  Restore the "
            "previous journal_dir (or move the directory back)."
        )
    if expected.ledger_dirs != zk_cookie.ledger_dirs:
        problems.append(
            f"ledger_dirs are {list(expected.ledger_dirs)} in the configuration, but this "
            f"bookie was created with {list(zk_cookie.ledger_dirs)} (cookie at {zk_path}).  "
            "Ledgers are placed by ledger id modulo the number of ledger dirs, so adding, "
            "removing or reordering dirs would hide stored entries: restore the previous "
            "list.  To really change the disks, decommission this bookie (its ledgers "
            "re-replicated elsewhere), delete its cookie and start it as a new bookie."
        )
    return problems


def _directory_problems(
    dirs: Sequence[DirectoryState], zk_cookie: Cookie, zk_path: str
) -> list[str]:
    problems = []
    known = {zk_cookie.journal_dir, *zk_cookie.ledger_dirs}
    for state in dirs:
        cookie = state.cookie
        if state.path not in known:
            continue  # a directory added to the configuration: reported as a changed list
        if cookie is None and not state.has_data:
            problems.append(
                f"{state.role} {state.path} is new or was wiped: its cookie is missing while "
                f"ZooKeeper has one ({zk_path}).  If the disk is just not mounted, mount it "
                "and start again.  If this bookie lost its data, it must not serve as if it "
                "had it: let its ledgers be re-replicated to other bookies, then delete the "
                f"cookie {zk_path} and every {COOKIE_FILE} file and data in its directories, "
                "and start it as a new bookie."
            )
        elif cookie is None:
            problems.append(
                f"{state.role} {state.path} holds data but no {COOKIE_FILE} file while "
                f"ZooKeeper has a cookie ({zk_path}): the file was deleted, or the directory "
                f"is not this bookie's.  If it is this bookie's, copy {COOKIE_FILE} from "
                "another of its directories."
            )
        else:
            ignoring_address = replace(cookie, advertised_address=zk_cookie.advertised_address)
            differences = ignoring_address.differences(zk_cookie)
            if differences:
                problems.append(
                    f"{state.role} {state.path} has a cookie that differs from ZooKeeper's "
                    f"({zk_path}): " + "; ".join(differences) + ".  The directory was copied "
                    "from another bookie or another configuration: restore the right one."
                )
    return problems


def _refusal(expected: Cookie, problems: list[str]) -> CookieMismatch:
    lines = "\n".join(f"- {problem}" for problem in problems)
    return CookieMismatch(
        f"bookie {expected.bookie_id} refuses to start: its identity (cookie) does not "
        f"match:\n{lines}"
    )


# --- files ------------------------------------------------------------------------------------


def read_directory(path: Path, role: str) -> DirectoryState:
    """The identity state of one data directory (blocking; a missing directory is empty)."""
    try:
        names = {entry.name for entry in os.scandir(path)}
    except FileNotFoundError:
        return DirectoryState(str(path), role, None, has_data=False)
    has_data = bool(names - _NOT_DATA)
    if COOKIE_FILE not in names:
        return DirectoryState(str(path), role, None, has_data=has_data)
    cookie_path = path / COOKIE_FILE
    try:
        cookie = Cookie.decode(cookie_path.read_bytes(), str(cookie_path))
    except (OSError, BadMetadata) as error:
        return DirectoryState(str(path), role, None, has_data=True, unreadable=str(error))
    return DirectoryState(str(path), role, cookie, has_data=has_data)


def write_cookie_file(directory: Path, cookie: Cookie) -> None:
    """Replace `directory/COOKIE` atomically and durably (blocking)."""
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / _COOKIE_TEMPORARY
    data = cookie.encode()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, directory / COOKIE_FILE)
    directory_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


def directory_roles(journal_dir: Path, ledger_dirs: Sequence[Path]) -> list[tuple[Path, str]]:
    """Each data directory once, with its role for messages."""
    roles: dict[Path, str] = {journal_dir: "journal dir"}
    for path in ledger_dirs:
        roles[path] = "journal and ledger dir" if path == journal_dir else "ledger dir"
    return list(roles.items())


# --- the start-up step ------------------------------------------------------------------------


async def establish_identity(
    store: MetadataStore,
    expected: Cookie,
    *,
    root: str,
    cluster: str,
) -> str | None:
    """Check (and on a first start or an address change, write) the bookie's cookies.

    Returns what was written, for the log (None: all matched).  Raises
    `CookieMismatch` with every problem and what to do about it, and what the
    store raises.
    """
    roles = directory_roles(Path(expected.journal_dir), [Path(p) for p in expected.ledger_dirs])
    dirs = [await anyio.to_thread.run_sync(read_directory, path, role) for path, role in roles]
    zk_path = MetadataLayout(root).cookie(expected.bookie_id)
    try:
        zk = await read_cookie(store, expected.bookie_id, root)
    except BadMetadata as error:
        raise _refusal(
            expected,
            [
                f"the cookie in ZooKeeper cannot be used ({error}).  Delete {zk_path} only if "
                "this bookie's directories hold its data and cookies: the next start then "
                "refuses with what else differs."
            ],
        ) from error
    plan = plan_identity(expected, zk, dirs, zk_path=zk_path, cluster=cluster)
    if plan.write_zk and plan.zk_first:
        await write_cookie(store, expected, plan.zk_version, root)
    for directory in plan.write_dirs:
        await anyio.to_thread.run_sync(write_cookie_file, Path(directory), expected)
    if plan.write_zk and not plan.zk_first:
        await write_cookie(store, expected, plan.zk_version, root)
    return plan.note
