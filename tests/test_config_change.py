"""`Config.change`: what `box.cfg{...}` may change on a running member, checked whole first."""

import pytest

from replicaset.config import InvalidOption, StaticOption, load


def test_dynamic_options_change_and_only_those_that_differ_are_returned():
    cfg = load()
    assert cfg.change({"read_only": True, "checkpoint_count": 2, "log_level": "debug"}) == {"read_only": True,
                                                                                            "log_level": "debug"}
    assert cfg.read_only is True and cfg.log_level == "debug"


@pytest.mark.parametrize("level, ours", [(1, "error"), (3, "error"), (4, "warning"), (5, "info"), (6, "debug"),
                                         (7, "debug")])
def test_tarantools_numeric_log_levels_are_taken_as_ours(level, ours):
    """A Tarantool operator types `box.cfg{log_level = 5}`; 1 to 3 (SYSERROR, ERROR, CRIT)
    are our `error`, 6 (VERBOSE) and 7 our `debug`."""
    cfg = load()
    cfg.change({"log_level": level})
    assert cfg.log_level == ours
    assert load(overrides={"log_level": level}).log_level == ours


def test_a_static_option_is_refused_in_tarantools_words_and_nothing_changes():
    cfg = load()
    with pytest.raises(StaticOption, match=r"^Can't set option 'wal_mode' dynamically$"):
        cfg.change({"read_only": True, "wal_mode": "fsync"})
    assert cfg.read_only is False and cfg.wal_mode == "write", "all the changes or none"
    with pytest.raises(StaticOption, match="'listen'"):
        cfg.change({"listen": "127.0.0.1:4000"})


@pytest.mark.parametrize("changes, message", [
    ({"checkpoint_count": 0}, r"^Incorrect value for option 'checkpoint_count': 0 is invalid, must be >= 1$"),
    ({"read_only": 1}, r"^Incorrect value for option 'read_only': expected bool, got 1$"),
    ({"log_level": "loud"}, "'log_level'.*debug, info, warning or error"),
    ({"log_level": 8}, "'log_level': expected str, got 8"),
    ({"replication_connect_quorum": True}, "'replication_connect_quorum': expected int or nothing"),
    ({"no_such_option": 1}, r"^Incorrect value for option 'no_such_option': unexpected option$"),
    ({1: 2}, "option '1': unexpected option"),
])
def test_a_bad_value_or_an_unknown_option_is_refused_naming_it(changes, message):
    cfg = load()
    with pytest.raises(InvalidOption, match=message):
        cfg.change({"read_only": True, **changes})
    assert cfg.read_only is False


def test_tarantools_name_of_an_option_we_name_otherwise_is_shown_and_taken():
    cfg = load()
    assert cfg.as_dict()["replication_synchro_timeout"] == 5.0
    assert cfg.change({"replication_synchro_timeout": 0.5}) == {"replication.synchro_timeout_s": 0.5}
    shown = cfg.as_dict()
    assert shown["replication.synchro_timeout_s"] == shown["replication_synchro_timeout"] == 0.5

