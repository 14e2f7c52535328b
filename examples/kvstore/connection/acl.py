"""Redis ACL users: their rules (a subset of `ACL SETUSER`'s), who may log in, what they may run.

Pure.  `AccessControl` holds the users (from configuration: `parse_acl_file`,
or `with_default_password` for a `requirepass`-style password) and counts
refusals; `authenticate` checks a username-password pair; `refusal` says
whether a connection may run a resolved command on its keys.

A user's rules apply in order to a user that starts as `reset` leaves it
(off, no passwords, no keys, no commands), as `ACL SETUSER` applies them:

    on, off                   the user may log in, or not
    >password, <password      add, remove a password (only its SHA-256 is kept)
    #hash, !hash              add, remove a password by its SHA-256 (64 hex digits)
    nopass                    any password logs in; forgets the passwords
    resetpass                 no password and not nopass: nobody logs in as the user
    ~pattern, allkeys         keys matching the glob pattern may be named; allkeys is ~*
    resetkeys                 no key may be named
    +command, -command        allow, forbid a command (a container: all its subcommands)
    +cont|sub, -cont|sub      allow, forbid one subcommand (+config|get)
    +@category, -@category    allow, forbid a category's commands (+@read, -@dangerous)
    allcommands, nocommands   +@all, -@all
    &pattern, allchannels, resetchannels
                              accepted and without effect (there is no Pub/Sub here)
    reset                     resetpass resetkeys -@all off

Keyword rules ignore case; categories and command names too.  A rule that is
none of these raises `RedisError` with Redis's text ("ERR Error in ACL
SETUSER modifier '+@nope': Unknown command or category name in ACL"); a
password rule is never quoted back (`>`, `<` and `nopass` are shown without
what follows).  Key selectors (`%R~`), selectors in parentheses and
`sanitize-payload` are not supported and are refused the same way.

The ACL file is Redis's `aclfile` format: one `user <name> <rule> ...` per
line, separated by spaces, one character per byte (as error messages hold
client bytes: `kvstore.errors`); blank lines and lines starting with `#` are
skipped (Redis allows neither).  A file that does not define `default` gets
Redis's default user, `on nopass ~* +@all`.

Commands Redis flags `no_auth` (AUTH, HELLO, QUIT, RESET) are allowed to
everyone, logged in or not, whatever the user's rules.  A connection starts
logged in as `default` when that user is on and `nopass`, else logged out;
logged out, every other command is refused with NOAUTH.  A user's refusals:
"NOPERM User <name> has no permissions to run the '<command>' command", and
"NOPERM No permissions to access a key" for a key outside its patterns (the keys of
DEBUG DIGEST-VALUE too, which Redis does not check).

Invariants: a `Restriction` of None means every command and every key (the
connection's hot path tests only that); passwords exist only as SHA-256
hex digests; `User` and `Restriction` never hold or show a password.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from kvstore.errors import RedisError, c_text
from kvstore.protocol import commands
from kvstore.protocol.commands import CommandSpec
from kvstore.protocol.glob import GlobPattern
from rsm.errors import InvalidConfig

DEFAULT_USER: Final = "default"
WRONGPASS: Final = "WRONGPASS invalid username-password pair or user is disabled."
NOAUTH: Final = "NOAUTH Authentication required."
NOPERM_KEY: Final = "NOPERM No permissions to access a key"
CATEGORIES: Final = (
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
)
"""Redis 7's ACL categories (`ACL CAT`); some have no command here."""
_HASH_HEX_CHARS: Final = 64
_ABSOLUTE_RULES: Final = frozenset({"+@all", "-@all", "allcommands", "nocommands"})
_SECRET_PREFIXES: Final = (">", "<")
_BAD_HASH: Final = (
    "The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
    "characters"
)
_EVERY_SPEC: Final[Mapping[str, CommandSpec]] = {
    spec.name: spec
    for command in commands.COMMANDS.values()
    for spec in (command, *command.subcommands.values())
}
_ALL_NAMES: Final = frozenset(_EVERY_SPEC)
_NO_AUTH: Final = frozenset(name for name, spec in _EVERY_SPEC.items() if "no_auth" in spec.flags)


def password_hash(password: bytes) -> str:
    """A password as Redis keeps it: the hex digest of its SHA-256."""
    return hashlib.sha256(password).hexdigest()


@dataclass(frozen=True, slots=True)
class Restriction:
    """What a connection that is not allowed everything may run."""

    logged_in: bool
    commands: frozenset[str]
    """Spec names allowed ("get", "config|get"); those flagged `no_auth` are always allowed."""
    key_patterns: tuple[GlobPattern, ...] | None
    """Keys allowed (None: every key)."""
    user: str


NOT_LOGGED_IN: Final = Restriction(False, _NO_AUTH, (), DEFAULT_USER)


@dataclass(frozen=True, slots=True)
class User:
    """One ACL user, as its rules left it."""

    name: str
    enabled: bool = False
    nopass: bool = False
    password_hashes: tuple[str, ...] = ()
    key_patterns: tuple[bytes, ...] = ()
    commands: frozenset[str] = frozenset()
    command_rules: tuple[str, ...] = ()
    """The command rules as given (lower case), for ACL LIST."""

    @property
    def restriction(self) -> Restriction | None:
        """What a connection logged in as this user may run (None: everything)."""
        every_key = b"*" in self.key_patterns
        if every_key and self.commands >= _ALL_NAMES:
            return None
        return Restriction(
            True,
            self.commands | _NO_AUTH,
            None if every_key else tuple(GlobPattern(each) for each in self.key_patterns),
            self.name,
        )

    def accepts(self, password: bytes) -> bool:
        """Whether `password` logs in as this user (which must also be on)."""
        if not self.enabled:
            return False
        if self.nopass:
            return True
        offered = password_hash(password)
        matched = False
        for known in self.password_hashes:
            matched |= hmac.compare_digest(known, offered)
        return matched

    def describe(self) -> str:
        """The user as ACL LIST shows it: its rules, passwords as their hashes."""
        words = ["user", self.name, "on" if self.enabled else "off"]
        if self.nopass:
            words.append("nopass")
        words += ("#" + digest for digest in self.password_hashes)
        if b"*" in self.key_patterns:
            words.append("~*")
        else:
            words += ("~" + c_text(pattern) for pattern in self.key_patterns)
        rules = self.command_rules
        if not rules or rules[0] not in _ABSOLUTE_RULES:
            rules = ("-@all", *rules)
        words += rules
        return " ".join(words)


DEFAULT: Final = User(
    DEFAULT_USER,
    enabled=True,
    nopass=True,
    key_patterns=(b"*",),
    commands=_ALL_NAMES,
    command_rules=("+@all",),
)
"""Redis's default user: on, nopass, every key, every command."""


def apply_rules(user: User, rules: Sequence[bytes]) -> User:
    """`user` after `rules`, in order; `RedisError` naming the first bad rule."""
    for raw in rules:
        user = _apply_rule(user, raw)
    return user


def _apply_rule(user: User, raw: bytes) -> User:
    rule = raw.decode("latin-1")
    word = rule.lower()
    if word == "on":
        return replace(user, enabled=True)
    if word == "off":
        return replace(user, enabled=False)
    if word == "nopass":
        return replace(user, nopass=True, password_hashes=())
    if word == "resetpass":
        return replace(user, nopass=False, password_hashes=())
    if word == "allkeys":
        return replace(user, key_patterns=(b"*",))
    if word == "resetkeys":
        return replace(user, key_patterns=())
    if word in ("allchannels", "resetchannels") or rule.startswith("&"):
        return user
    if word == "reset":
        return User(user.name)
    if rule.startswith(">"):
        return _with_hash(user, password_hash(raw[1:]))
    if rule.startswith("<"):
        return _without_hash(user, password_hash(raw[1:]), rule)
    if rule.startswith(("#", "!")):
        digest = rule[1:]
        if len(digest) != _HASH_HEX_CHARS or any(c not in "0123456789abcdef" for c in digest):
            raise RedisError(_bad_rule(rule, _BAD_HASH))
        return _with_hash(user, digest) if rule[0] == "#" else _without_hash(user, digest, rule)
    if rule.startswith("~"):
        if b"*" in user.key_patterns:
            return user
        pattern = raw[1:]
        if pattern == b"*":
            return replace(user, key_patterns=(b"*",))
        return replace(user, key_patterns=(*user.key_patterns, pattern))
    if word in ("allcommands", "nocommands") or rule[:1] in ("+", "-"):
        return _command_rule(user, word)
    raise RedisError(_bad_rule(rule, "Syntax error"))


def _with_hash(user: User, digest: str) -> User:
    hashes = user.password_hashes
    if digest not in hashes:
        hashes = (*hashes, digest)
    return replace(user, nopass=False, password_hashes=hashes)


def _without_hash(user: User, digest: str, rule: str) -> User:
    if digest not in user.password_hashes:
        raise RedisError(_bad_rule(rule, "no such password"))
    hashes = tuple(each for each in user.password_hashes if each != digest)
    return replace(user, nopass=False, password_hashes=hashes)


def _command_rule(user: User, word: str) -> User:
    if word == "allcommands":
        word = "+@all"
    elif word == "nocommands":
        word = "-@all"
    adding = word[0] == "+"
    target = word[1:]
    names = _rule_names(target)
    if names is None:
        raise RedisError(_bad_rule(word, "Unknown command or category name in ACL"))
    allowed = user.commands | names if adding else user.commands - names
    return replace(user, commands=allowed, command_rules=(*user.command_rules, word))


def _rule_names(target: str) -> frozenset[str] | None:
    """The spec names a command rule's target covers (None: no such command or category)."""
    if target.startswith("@"):
        category = target[1:]
        if category == "all":
            return _ALL_NAMES
        if category not in CATEGORIES:
            return None
        return frozenset(category_commands(category))
    spec = _EVERY_SPEC.get(target)
    if spec is None:
        return None
    return frozenset({spec.name, *(sub.name for sub in spec.subcommands.values())})


def category_commands(category: str) -> list[str]:
    """The commands and subcommands of a category ("read", without the @), as ACL CAT lists them."""
    return sorted(name for name, spec in _EVERY_SPEC.items() if "@" + category in spec.categories)


def _bad_rule(rule: str, reason: str) -> str:
    shown = rule[:1] if rule.startswith(_SECRET_PREFIXES) else rule
    return f"ERR Error in ACL SETUSER modifier '{shown}': {reason}"


@dataclass(slots=True)
class AccessControl:
    """The users, and the refusals counted (INFO's `acl_access_denied_*`)."""

    users: Mapping[str, User] = field(default_factory=lambda: {DEFAULT_USER: DEFAULT})
    auth_failures: int = 0
    """AUTH and HELLO AUTH refused: a wrong password, or a user unknown or off."""
    commands_denied: int = 0
    keys_denied: int = 0

    @property
    def initial(self) -> Restriction | None:
        """What a new (or RESET) connection may run: as `default` if it needs no password."""
        default = self.users.get(DEFAULT_USER)
        if default is not None and default.enabled and default.nopass:
            return default.restriction
        return NOT_LOGGED_IN

    @property
    def required(self) -> bool:
        """Whether new connections must log in."""
        return self.initial is NOT_LOGGED_IN

    def authenticate(self, username: bytes, password: bytes) -> User | None:
        """The user a pair logs in as, or None (counted in `auth_failures`)."""
        user = self.users.get(username.decode("latin-1"))
        if user is None or not user.accepts(password):
            self.auth_failures += 1
            return None
        return user


def with_default_password(password: bytes) -> AccessControl:
    """Redis's `requirepass`: the default user, every key and command, with this password."""
    return AccessControl({DEFAULT_USER: _with_hash(DEFAULT, password_hash(password))})


def parse_acl_file(text: str, source: str) -> AccessControl:
    """The users of an ACL file (see the module docstring) called `source` in errors;
    `InvalidConfig` naming the file and the line."""
    users: dict[str, User] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        try:
            user = _declaration(words, users)
        except RedisError as error:
            raise InvalidConfig(f"{source}:{number}: {error.message}") from None
        users[user.name] = user
    users.setdefault(DEFAULT_USER, DEFAULT)
    return AccessControl(users)


def _declaration(words: Sequence[str], known: Mapping[str, User]) -> User:
    if words[0] != "user" or len(words) < 2:
        raise RedisError("ERR an ACL file line is 'user <name> <rule> ...'")
    name = words[1]
    if name in known:
        raise RedisError(f"ERR user '{name}' is defined twice")
    return apply_rules(User(name), [word.encode("latin-1") for word in words[2:]])


def refusal(
    restriction: Restriction, spec: CommandSpec, args: Sequence[bytes], access: AccessControl
) -> RedisError | None:
    """Why a connection so restricted may not run `spec` with `args` (None: it may)."""
    name = spec.name
    if name not in restriction.commands:
        if not restriction.logged_in:
            return RedisError(NOAUTH)
        access.commands_denied += 1
        return RedisError(
            f"NOPERM User {restriction.user} has no permissions to run the '{name}' command"
        )
    patterns = restriction.key_patterns
    if patterns is not None and not _keys_allowed(_named_keys(spec, args), patterns):
        access.keys_denied += 1
        return RedisError(NOPERM_KEY)
    return None


def _named_keys(spec: CommandSpec, args: Sequence[bytes]) -> Sequence[bytes]:
    """The keys a call names: its spec's, and the keys of DEBUG DIGEST-VALUE, whose digests
    would otherwise tell a user about keys outside its patterns (Redis's DEBUG has no key
    positions, but is off unless `enable-debug-command` turns it on)."""
    if spec.name == "debug" and len(args) > 2 and args[1].lower() == b"digest-value":
        return args[2:]
    return spec.keys(args)


def _keys_allowed(keys: Iterable[bytes], patterns: Sequence[GlobPattern]) -> bool:
    return all(any(pattern.matches(key) for pattern in patterns) for key in keys)
