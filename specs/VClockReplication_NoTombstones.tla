-------------------- MODULE VClockReplication_NoTombstones --------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Last-writer-wins without tombstones: a newer delete  *)
(* removes the row and its version, so an older insert that arrives later  *)
(* brings the row back on one member but not on another.                   *)
(* VClockReplication_NoTombstones.cfg replaces ApplyRow with               *)
(* ApplyRowNoTombstone; TLC must report EqualVClocksEqualTables violated.  *)
(***************************************************************************)
EXTENDS VClockReplication

ApplyRowNoTombstone(t, r) ==
    [k \in Keys |->
        IF \E c \in r.ops : c.key = k
        THEN LET c == CHOOSE c \in r.ops : c.key = k
             IN IF AtLeast(r, t[k])
                THEN IF c.val = DELETE THEN NoVersion
                     ELSE [val |-> c.val, hlc |-> r.hlc, origin |-> r.origin]
                ELSE t[k]
        ELSE t[k]]
=============================================================================
