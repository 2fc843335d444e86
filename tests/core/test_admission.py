from replicaset.core.admission import Admission, admit


def test_the_next_row_is_taken_a_copy_is_dropped_and_a_hole_is_a_gap() -> None:
    assert admit(4, 5) is Admission.NEXT
    assert admit(4, 4) is Admission.HELD
    assert admit(4, 1) is Admission.HELD
    assert admit(4, 6) is Admission.GAP
    assert admit(0, 1) is Admission.NEXT
