import tomllib
from pathlib import Path

import pytest

from replicaset.access import guest_rights, parse_users
from replicaset.config import ConfigError, dial_address, kept_config, load


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_follow_tarantool():
    cfg = load()
    assert cfg.wal_mode == "write"
    assert cfg.wal_max_size == 64 * 1024 * 1024
    assert cfg.read_only is False
    assert cfg["sql.auto_id_mode"] == "compact"


def test_file_sections_and_flag_overrides(tmp_path):
    path = write(tmp_path, 'listen = "127.0.0.1:4000"\nwal_mode = "fsync"\n[wal]\ngroup_commit_rows_max = 8\n[sql]\nauto_id_mode = "extended"\n')
    cfg = load(path, {"listen": "127.0.0.1:5000"})
    assert cfg.listen == "127.0.0.1:5000"
    assert cfg.wal_mode == "fsync"
    assert cfg["wal.group_commit_rows_max"] == 8
    assert cfg["sql.auto_id_mode"] == "extended"


def test_a_file_overrides_the_kept_config_option_by_option_in_sections_too(tmp_path):
    """`serve --config FILE` on a data directory that keeps a config: what FILE leaves out
    (here `listen`, one of two `[wal]` options, one of two `[replication]` ones) stays."""
    kept = tmp_path / "kept.toml"
    kept.write_text('listen = "127.0.0.1:4000"\nwal_mode = "fsync"\n[wal]\ngroup_commit_rows_max = 8\n'
                    '[replication]\nsynchro_timeout_s = 7\n[auth.users]\nadmin = "a"\n')
    given = tmp_path / "given.toml"
    given.write_text('wal_mode = "write"\n[wal]\ngroup_commit_delay_ms = 2\n[replication]\n'
                     'default_write_consistency = "one"\n')
    cfg = load(given, {"read_only": True}, base=kept)
    assert cfg.listen == "127.0.0.1:4000" and cfg.wal_mode == "write" and cfg.read_only is True
    assert cfg["wal.group_commit_rows_max"] == 8 and cfg["wal.group_commit_delay_ms"] == 2
    assert cfg["replication.synchro_timeout_s"] == 7 and cfg["replication.default_write_consistency"] == "one"
    assert cfg["auth.users"] == {"admin": "a"}
    given.write_text('[auth.users]\nbob = "b"\n')
    assert load(given, base=kept)["auth.users"] == {"bob": "b"}, "a table-valued option is replaced whole"


def test_the_kept_config_listens_where_the_flag_said_and_keeps_the_rest_as_written():
    text = '# our set\nlisten = "127.0.0.1:4000"  # the file\'s\nwal_mode = "fsync"\n[wal]\ngroup_commit_rows_max = 8\n'
    kept = kept_config(text, "127.0.0.1:5000")
    assert tomllib.loads(kept) == {"listen": "127.0.0.1:5000", "wal_mode": "fsync", "wal": {"group_commit_rows_max": 8}}
    assert "# our set" in kept and '# listen = "127.0.0.1:4000"' in kept
    assert tomllib.loads(kept_config("", "127.0.0.1:5000")) == {"listen": "127.0.0.1:5000"}


def test_the_replication_section_beside_the_replication_option(tmp_path):
    """TOML cannot hold both in one file; the section alone must not be taken for the list."""
    cfg = load(write(tmp_path, "[replication]\nauto_rejoin = true\n"))
    assert cfg["replication.auto_rejoin"] is True and cfg.replication == []
    assert load(write(tmp_path, 'replication = ["127.0.0.1:3301"]\n')).replication == ["127.0.0.1:3301"]


def test_dial_maps_a_peers_registered_address_to_the_one_dialed(tmp_path):
    """A peer behind a port forward: dialed at the mapped address, every other as registered."""
    cfg = load(write(tmp_path, '[cluster]\ndial = { "127.0.0.1:4001" = "127.0.0.1:5001" }\n'))
    assert dial_address(cfg, "127.0.0.1:4001") == "127.0.0.1:5001"
    assert dial_address(cfg, "127.0.0.1:4002") == "127.0.0.1:4002"
    assert dial_address(load(), "127.0.0.1:4001") == "127.0.0.1:4001"


@pytest.mark.parametrize(
    "text, option",
    [
        ('wal_mode = "sometimes"', "wal_mode"),
        ("wal_max_size = 10", "wal_max_size"),
        ('read_only = "yes"', "read_only"),
        ("checkpoint_count = true", "checkpoint_count"),
        ('replication = ["nohost"]', "replication"),
        ("no_such_option = 1", "no_such_option"),
        ("[sql]\nauto_id_mode = 53", "sql.auto_id_mode"),
        ("[sql]\nbogus = 1", "sql.bogus"),
        ('[cluster]\ndial = { "127.0.0.1:4001" = "nowhere" }', "cluster.dial"),
        ('[cluster]\ndial = { "4001" = "127.0.0.1:5001" }', "cluster.dial"),
    ],
)
def test_invalid_options_are_refused_by_name(tmp_path, text, option):
    with pytest.raises(ConfigError, match=option.replace(".", r"\.")):
        load(write(tmp_path, text))


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(write(tmp_path, "this is = = not toml"))


@pytest.mark.parametrize("text, message", [
    ("[gc]\nmin_retention_s = 600\n", "min_retention_s = 600 is below \\[replication\\] delta_sync_threshold_seconds"),
    ("[gc]\nmax_retention_s = 5000\n", "below twice \\[replication\\] delta_sync_threshold_seconds = 3600.0: raise "
                                       "max_retention_s to at least 7200"),
    ("[replication]\ndelta_sync_threshold_seconds = 0\n[gc]\nmin_retention_s = 10\nmax_retention_s = 5\n",
     "max_retention_s = 5 is below min_retention_s = 10"),
])
def test_wal_retention_must_cover_the_delta_sync_window(tmp_path, text, message):
    """Marmot's rule: WAL kept shorter than the delta sync window sends members that could
    catch up from the log to a checkpoint transfer."""
    with pytest.raises(ConfigError, match=message):
        load(write(tmp_path, text))
    assert load(write(tmp_path, "[replication]\ndelta_sync_threshold_seconds = 60\n[gc]\nmin_retention_s = 60\n"
                                "max_retention_s = 120\n"))["gc.min_retention_s"] == 60


def test_users_as_passwords_and_as_tables(tmp_path):
    """The string form stays a superuser; the table form carries grants and privileges."""
    cfg = load(write(tmp_path, '[auth.users]\nroot = "pw"\n[auth.users.bob]\npassword = "x"\n'
                               'grants = { "*" = ["read"], Accounts = ["write"] }\nprivileges = ["ddl"]\n'
                               '[auth.users.guest]\ngrants = { public = ["read"] }\n'))
    users = parse_users(cfg["auth.users"])
    assert users["root"].rights.admin and users["root"].rights.sql_unrestricted
    bob = users["bob"].rights
    assert (bob.read, bob.write, bob.ddl, bob.admin) == ({"*"}, {"accounts"}, True, False)
    assert bob.may_write("ACCOUNTS") and not bob.may_write("notes") and not bob.sql_unrestricted
    assert guest_rights(users, True).read == {"public"} and guest_rights(users, False) is None
    assert guest_rights({}, True).admin, "no user at all: the open loopback mode"


@pytest.mark.parametrize("text, message", [
    ('[auth.users.bob]\ngrants = {}\n', "user 'bob': give exactly one of password and password_hash"),
    ('[auth.users.bob]\npassword = "x"\nprivileges = ["read"]\n', "privileges must be a list of ddl and admin"),
    ('[auth.users.bob]\npassword = "x"\ngrants = { t = ["delete"] }\n', "grants on 't' must be a list of read and write"),
    ('[auth.users.bob]\npassword_hash = "nothash"\n', "password_hash must be base64 of the 20 bytes"),
    ('[auth.users.bob]\npassword = "x"\nrole = "dba"\n', "unknown key\\(s\\) role"),
    ('[auth.users]\nguest = "x"\n', "guest has no password"),
    ('[auth]\nguest = false\n', "guest = false with no \\[auth\\] users: no one could log in"),
    ('[auth]\nguest = false\n[auth.users.guest]\ngrants = { t = ["read"] }\n', "no one could log in"),
])
def test_malformed_users_are_refused_with_the_reason(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load(write(tmp_path, text))
