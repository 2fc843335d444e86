"""The checkers flag what they exist to flag, on made-up histories: a run that lost an
acknowledged write, applied one twice, broke the bank's total or left members disagreeing
must fail, or the harness proves nothing."""

from __future__ import annotations

from typing import Any

from replicaset.iproto.constants import ErrorCode
from replicaset.testing.chaos.history import (FAILED, OK, UNKNOWN, Op, check_bank, check_registers, check_set,
                                              divergent_rows, outcome_of_error)


def op(kind: str, value: Any, outcome: str, result: Any = None, workload: str = "w") -> Op:
    return Op(workload=workload, worker=0, member=1, kind=kind, value=value, outcome=outcome, start_s=0.0, end_s=0.1,
              result=result)


def test_a_set_holding_every_acknowledged_insert_once_passes_whatever_the_unknown_ones_did() -> None:
    ops = [op("insert", 1, OK), op("insert", 2, OK), op("insert", 3, UNKNOWN), op("insert", 4, UNKNOWN),
           op("insert", 5, FAILED)]
    check = check_set(ops, [1, 2, 3])
    assert check.ok and check.lost == 0 and check.duplicates == 0, check.problems
    assert check.figures["unknown_present"] == 1


def test_a_lost_acknowledged_insert_fails_the_set() -> None:
    check = check_set([op("insert", 1, OK), op("insert", 2, OK)], [1])
    assert not check.ok and check.lost == 1
    assert "acknowledged inserts lost: [2]" in check.problems[0]


def test_an_insert_applied_twice_fails_the_set() -> None:
    check = check_set([op("insert", 1, OK), op("insert", 2, UNKNOWN)], [1, 2, 2])
    assert not check.ok and check.duplicates == 1


def test_a_definitely_failed_insert_that_is_present_fails_the_set() -> None:
    check = check_set([op("insert", 1, OK), op("insert", 2, FAILED)], [1, 2])
    assert not check.ok and "failed inserts present" in check.problems[0]


def test_a_value_no_one_inserted_fails_the_set() -> None:
    assert not check_set([op("insert", 1, OK)], [1, 99]).ok


BALANCES = [[1, 60], [2, 140], [3, 100]]


def test_a_bank_whose_reads_and_end_keep_the_total_passes() -> None:
    ops = [op("transfer", [1, 2, 40], OK, result=2), op("read", None, OK, result=BALANCES)]
    assert check_bank(ops, {1: BALANCES}, accounts=3, total=300).ok


def test_a_read_with_a_half_done_transfer_fails_the_bank() -> None:
    ops = [op("read", None, OK, result=[[1, 60], [2, 100], [3, 100]])]
    check = check_bank(ops, {1: BALANCES}, accounts=3, total=300)
    assert not check.ok and "totals 260, not 300" in check.problems[0]


def test_a_negative_balance_at_the_end_fails_the_bank() -> None:
    check = check_bank([], {1: BALANCES, 2: [[1, -10], [2, 210], [3, 100]]}, accounts=3, total=300)
    assert check.problems == ["member 2's final table has negative balances {1: -10}"]


def test_a_missing_account_fails_the_bank() -> None:
    assert not check_bank([], {1: [[1, 200], [2, 100]]}, accounts=3, total=300).ok


def test_registers_that_agree_on_values_written_pass() -> None:
    ops = [op("write", [1, 7], OK), op("write", [2, 8], UNKNOWN)]
    assert check_registers(ops, [[[1, 7], [2, 8]], [[1, 7], [2, 8]]], initial=0).ok
    assert check_registers(ops, [[[1, 7], [2, 0]], [[1, 7], [2, 0]]], initial=0).ok


def test_members_disagreeing_on_a_register_fail() -> None:
    ops = [op("write", [1, 7], OK), op("write", [1, 9], OK)]
    check = check_registers(ops, [[[1, 7]], [[1, 9]]], initial=0)
    assert not check.ok and "disagree on registers [1]" in check.problems[0]


def test_a_register_holding_a_value_only_a_failed_write_wrote_fails() -> None:
    ops = [op("write", [1, 7], OK), op("write", [1, 9], FAILED)]
    assert not check_registers(ops, [[[1, 9]], [[1, 9]]], initial=0).ok


def test_divergent_rows_count_rows_that_differ_or_are_missing_on_a_member() -> None:
    same = {"t": [[1, "a"], [2, "b"]]}
    assert divergent_rows([same, same]) == {}
    assert divergent_rows([same, {"t": [[1, "a"], [2, "c"]]}, {"t": [[1, "a"]]}]) == {"t": 1}
    assert divergent_rows([same, {"t": [[1, "a"], [2, "b"]], "u": [[5]]}]) == {"u": 1}


def test_only_errors_that_say_so_count_as_failed() -> None:
    assert outcome_of_error(ErrorCode.TRANSACTION_CONFLICT, "row acct:1 is held") == FAILED
    assert outcome_of_error(ErrorCode.SYNC_QUORUM_TIMEOUT, "1 of 3 members prepared") == FAILED
    assert outcome_of_error(ErrorCode.TIMEOUT, "transaction 0x1 committed, but fewer than 2 of 3") == OK
    assert outcome_of_error(ErrorCode.WAL_IO, "write failed") == UNKNOWN
    assert outcome_of_error(ErrorCode.SHUTDOWN, "shutting down") == UNKNOWN
