"""ACL users: the rule parser, the ACL file, connections that log in (or not) and are refused."""

from __future__ import annotations

import hashlib
import re

import pytest
from kvstore.connection.acl import (
    DEFAULT,
    AccessControl,
    User,
    apply_rules,
    parse_acl_file,
    password_hash,
    with_default_password,
)
from kvstore.errors import RedisError

from rsm.errors import InvalidConfig
from tests.unit.kvstore.replica import Conversation, Replica

ACL_FILE = """\
# the store's users
user admin on >admin-secret ~* +@all

user reader on >reader-secret ~* -@all +@read +@connection
user writer on #{writer_hash} ~app:* +@all -@dangerous
user ghost off >ghost-secret ~* +@all
""".format(writer_hash=hashlib.sha256(b"writer-secret").hexdigest())


def rules(*words: str) -> User:
    return apply_rules(User("u"), [word.encode() for word in words])


def refused(*words: str) -> str:
    with pytest.raises(RedisError) as raised:
        rules(*words)
    return raised.value.message


# --- the rules ---------------------------------------------------------------------------------


def test_a_new_user_may_do_nothing_until_its_rules_say() -> None:
    user = rules()
    assert not user.enabled
    assert not user.nopass
    assert not user.password_hashes
    assert not user.accepts(b"")
    restriction = user.restriction
    assert restriction is not None
    assert "get" not in restriction.commands
    assert "auth" in restriction.commands
    assert "hello" in restriction.commands


def test_passwords_are_kept_as_sha256_only() -> None:
    user = rules("on", ">s3cret", "#" + "ab" * 32)
    assert user.password_hashes == (hashlib.sha256(b"s3cret").hexdigest(), "ab" * 32)
    assert "s3cret" not in repr(user)
    assert "s3cret" not in user.describe()
    assert user.accepts(b"s3cret")
    assert not user.accepts(b"s3cret ")
    assert not rules("off", ">s3cret").accepts(b"s3cret")
    assert not rules("on", ">s3cret", "<s3cret").password_hashes
    assert rules("on", ">a", "nopass").accepts(b"anything")
    assert not rules("on", "nopass", "resetpass").accepts(b"")
    assert rules("on", ">a", ">a").password_hashes == (password_hash(b"a"),)


def test_command_rules_apply_in_order() -> None:
    reader = rules("on", "nopass", "allkeys", "-@all", "+@read").restriction
    assert reader is not None
    assert {"get", "mget", "exists"} <= reader.commands
    assert "set" not in reader.commands
    assert "del" not in reader.commands
    writer = rules("+@all", "-@dangerous").restriction
    assert writer is not None
    assert "set" in writer.commands
    assert "flushall" not in writer.commands
    assert "keys" not in writer.commands
    assert "info" not in writer.commands
    one = rules("-@all", "+config|get", "+client", "-client|id").restriction
    assert one is not None
    assert "config|get" in one.commands
    assert "config|help" not in one.commands
    assert "client|setname" in one.commands
    assert "client|id" not in one.commands
    assert rules("nocommands", "allcommands").commands == rules("+@all").commands


def test_every_key_and_every_command_is_no_restriction() -> None:
    assert rules("on", "nopass", "~*", "+@all").restriction is None
    assert rules("on", "nopass", "allkeys", "allcommands").restriction is None
    assert rules("on", "nopass", "~app:*", "+@all").restriction is not None
    assert rules("on", "nopass", "~*", "+@all", "-get").restriction is not None
    assert DEFAULT.restriction is None


def test_key_patterns() -> None:
    user = rules("~app:*", "~cache:?")
    assert user.key_patterns == (b"app:*", b"cache:?")
    assert rules("~a", "allkeys", "~b").key_patterns == (b"*",)
    assert rules("~a", "resetkeys").key_patterns == ()
    assert rules("&*", "allchannels", "resetchannels") == rules()


def test_reset_forgets_everything() -> None:
    assert rules("on", ">x", "~*", "+@all", "reset") == User("u")


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (("+@nope",), "ERR Error in ACL SETUSER modifier '+@nope': Unknown command or category"),
        (("-frobnicate",), "ERR Error in ACL SETUSER modifier '-frobnicate': Unknown command"),
        (("+config|nope",), "ERR Error in ACL SETUSER modifier '+config|nope': Unknown command"),
        (("sometimes",), "ERR Error in ACL SETUSER modifier 'sometimes': Syntax error"),
        (("%R~*",), "ERR Error in ACL SETUSER modifier '%R~*': Syntax error"),
        (("#abc",), "ERR Error in ACL SETUSER modifier '#abc': The password hash must be"),
        (("!" + "A" * 64,), "The password hash must be exactly 64 characters"),
        (("<never-added",), "ERR Error in ACL SETUSER modifier '<': no such password"),
    ],
)
def test_bad_rules_are_refused_clearly(words: tuple[str, ...], message: str) -> None:
    assert message in refused(*words)


def test_a_refused_password_rule_is_not_quoted() -> None:
    assert "never-added" not in refused("<never-added")


def test_describe_reads_back_as_the_same_user() -> None:
    for user in parse_acl_file(ACL_FILE, "users.acl").users.values():
        again = parse_acl_file(user.describe(), "again").users[user.name]
        assert (again.enabled, again.nopass, again.password_hashes, again.key_patterns) == (
            user.enabled,
            user.nopass,
            user.password_hashes,
            user.key_patterns,
        )
        assert again.commands == user.commands


# --- the ACL file ------------------------------------------------------------------------------


def test_acl_file() -> None:
    access = parse_acl_file(ACL_FILE, "users.acl")
    assert sorted(access.users) == ["admin", "default", "ghost", "reader", "writer"]
    assert access.users["default"] == DEFAULT
    assert not access.required
    assert access.authenticate(b"writer", b"writer-secret") is access.users["writer"]
    assert access.authenticate(b"ghost", b"ghost-secret") is None
    assert access.authenticate(b"nobody", b"x") is None
    assert access.auth_failures == 2


def test_an_acl_file_may_lock_the_default_user() -> None:
    access = parse_acl_file("user default off\nuser a on >p ~* +@all\n", "users.acl")
    assert access.required


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("user a on\nuser a off\n", "users.acl:2: ERR user 'a' is defined twice"),
        ("usr a on\n", "users.acl:1: ERR an ACL file line is 'user <name> <rule> ...'"),
        ("user\n", "users.acl:1: ERR an ACL file line"),
        ("\n\nuser a on +@nope\n", "users.acl:3: ERR Error in ACL SETUSER modifier '+@nope'"),
    ],
)
def test_a_bad_acl_file_names_its_line(text: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match="^" + re.escape(message)):
        parse_acl_file(text, "users.acl")


def test_a_bad_acl_file_does_not_show_passwords() -> None:
    with pytest.raises(InvalidConfig) as raised:
        parse_acl_file("user a on >hunter2 <hunter3\n", "users.acl")
    assert "hunter" not in str(raised.value)


# --- connections -------------------------------------------------------------------------------


def conversation(access: AccessControl) -> Conversation:
    return Conversation(Replica(), access=access)


def test_without_a_password_everything_is_as_before() -> None:
    talk = conversation(AccessControl())
    assert talk.client.restriction is None
    assert talk.send(["SET", "k", "v"], ["GET", "k"], ["ACL", "WHOAMI"]) == (
        b"+OK\r\n$1\r\nv\r\n$7\r\ndefault\r\n"
    )
    assert talk.send(["AUTH", "x"]).startswith(b"-ERR AUTH <password> called without any password")
    assert talk.send(["AUTH", "default", "anything"]) == b"+OK\r\n"


def test_requirepass() -> None:
    access = with_default_password(b"s3cret")
    talk = conversation(access)
    noauth = b"-NOAUTH Authentication required.\r\n"
    assert talk.send(["GET", "k"], ["SET", "k", "v"], ["ACL", "WHOAMI"]) == noauth * 3
    assert talk.send(["NOSUCH"]).startswith(b"-ERR unknown command 'NOSUCH'")
    assert talk.send(["PING"]) == noauth
    assert talk.send(["AUTH", "wrong"]) == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    )
    assert access.auth_failures == 1
    assert talk.send(["GET", "k"]) == noauth
    assert talk.send(["AUTH", "s3cret"], ["SET", "k", "v"], ["GET", "k"]) == (
        b"+OK\r\n+OK\r\n$1\r\nv\r\n"
    )
    assert talk.client.restriction is None
    assert talk.send(["AUTH", "wrong"]).startswith(b"-WRONGPASS")
    assert talk.send(["GET", "k"]) == b"$1\r\nv\r\n", "a failed AUTH leaves the login as it was"
    assert talk.send(["RESET"], ["GET", "k"]) == b"+RESET\r\n" + noauth
    assert talk.send(["QUIT"]) == b"+OK\r\n"


def test_hello_logs_in() -> None:
    access = with_default_password(b"s3cret")
    talk = conversation(access)
    assert talk.send(["HELLO", "3"]).startswith(b"-NOAUTH HELLO must be called with the client")
    assert talk.send(["HELLO", "3", "AUTH", "default", "nope"]).startswith(b"-WRONGPASS")
    assert not talk.client.resp3, "a refused HELLO does not switch the protocol"
    assert talk.send(["HELLO", "3", "AUTH", "default", "s3cret"]).startswith(b"%7\r\n")
    assert talk.send(["SET", "k", "v"]) == b"+OK\r\n"
    assert access.auth_failures == 1


def test_users_and_their_rights() -> None:
    access = parse_acl_file(ACL_FILE, "users.acl")
    talk = conversation(access)
    assert talk.client.restriction is None, "the default user is on and nopass"
    assert talk.send(["SET", "app:1", "v"]) == b"+OK\r\n"
    assert talk.send(["AUTH", "reader", "reader-secret"], ["GET", "app:1"]) == (
        b"+OK\r\n$1\r\nv\r\n"
    )
    assert talk.send(["SET", "app:1", "w"]) == (
        b"-NOPERM User reader has no permissions to run the 'set' command\r\n"
    )
    assert talk.send(["CONFIG", "GET", "*"]).startswith(b"-NOPERM User reader has no permissions")
    assert access.commands_denied == 2
    assert talk.send(["AUTH", "writer", "writer-secret"], ["SET", "app:2", "x"]) == (
        b"+OK\r\n+OK\r\n"
    )
    assert talk.send(["GET", "other"]) == b"-NOPERM No permissions to access a key\r\n"
    assert talk.send(["MSET", "app:3", "a", "other", "b"]).startswith(b"-NOPERM No permissions")
    assert talk.send(["WATCH", "other"]).startswith(b"-NOPERM No permissions")
    assert access.keys_denied == 3
    assert talk.send(["FLUSHALL"]).startswith(b"-NOPERM User writer")
    assert talk.send(["ACL", "WHOAMI"]) == b"$6\r\nwriter\r\n"
    assert talk.send(["AUTH", "ghost", "ghost-secret"]).startswith(b"-WRONGPASS")
    assert talk.send(["ACL", "WHOAMI"]) == b"$6\r\nwriter\r\n"


def test_a_refused_command_aborts_the_transaction() -> None:
    talk = conversation(parse_acl_file(ACL_FILE, "users.acl"))
    talk.send(["AUTH", "writer", "writer-secret"])
    assert talk.send(["MULTI"], ["SET", "app:1", "v"], ["SET", "other", "v"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n-NOPERM No permissions to access a key\r\n"
        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    )
    assert talk.send(["GET", "app:1"]) == b"$-1\r\n"


def test_a_refused_exec_ends_the_transaction() -> None:
    talk = conversation(parse_acl_file("user default on nopass ~* +@all -exec\n", "users.acl"))
    assert talk.send(["MULTI"], ["SET", "a", "v"], ["EXEC"], ["DISCARD"], ["GET", "a"]) == (
        b"+OK\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of: NOPERM User "
        b"default has no permissions to run the 'exec' command\r\n"
        b"-ERR DISCARD without MULTI\r\n$-1\r\n"
    )


def test_acl_commands() -> None:
    talk = conversation(parse_acl_file(ACL_FILE, "users.acl"))
    users = talk.send(["ACL", "USERS"])
    assert users == (
        b"*5\r\n$5\r\nadmin\r\n$7\r\ndefault\r\n$5\r\nghost\r\n$6\r\nreader\r\n$6\r\nwriter\r\n"
    )
    listing = talk.send(["ACL", "LIST"])
    assert b"user default on nopass ~* +@all\r\n" in listing
    assert b"user reader on #" + password_hash(b"reader-secret").encode() in listing
    assert b"user writer on #" in listing
    assert b"~app:* +@all -@dangerous" in listing
    assert b"secret\r\n" not in listing
    assert b"-secret" not in listing
    assert b"$3\r\nget\r\n" in talk.send(["ACL", "CAT", "read"])
    assert b"$9\r\ndangerous\r\n" in talk.send(["ACL", "CAT"])
    assert talk.send(["ACL", "CAT", "nope"]) == b"-ERR Unknown category 'nope'\r\n"
    assert talk.send(["ACL", "SETUSER", "x"]).startswith(b"-ERR unknown subcommand 'SETUSER'")
    talk.send(["AUTH", "reader", "reader-secret"])
    assert talk.send(["ACL", "LIST"]).startswith(b"-NOPERM User reader has no permissions")


def test_info_counts_refusals() -> None:
    access = parse_acl_file(ACL_FILE, "users.acl")
    talk = conversation(access)
    talk.send(["AUTH", "reader", "nope"], ["AUTH", "reader", "reader-secret"], ["SET", "a", "b"])
    talk.send(["AUTH", "writer", "writer-secret"], ["GET", "other"])
    talk.send(["AUTH", "admin", "admin-secret"])
    info = talk.send(["INFO", "stats"])
    assert b"acl_access_denied_auth:0" in info, "the conversation's fixed status shows zeros"
    assert (access.auth_failures, access.commands_denied, access.keys_denied) == (1, 1, 1)
    stats = talk.client.stats
    assert (stats.rejected["set"], stats.rejected["get"], stats.failed["auth"]) == (1, 1, 1)
    assert (stats.errors["NOPERM"], stats.errors["WRONGPASS"]) == (2, 1)
