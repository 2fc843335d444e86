-------------------- MODULE Membership_UnsyncedChanges --------------------
(***************************************************************************)
(* The registration rules as first written (finding F5 in                  *)
(* docs/design/FINDINGS.md; docs/design/README.md §4.7 holds the corrected *)
(* one).  A _cluster change follows wal_mode like any row.  The first      *)
(* joiner of a two-member set holds its own row, which makes a majority,   *)
(* and takes writes; the registrar loses the row in an OS crash, and its   *)
(* recovery fetch asks only the members its surviving log names, which no  *)
(* longer include the joiner.  The id is allocated again.                  *)
(* Membership_UnsyncedChanges.cfg replaces ChangesDurable with             *)
(* ChangesFollowWalMode; TLC must report UniqueIds violated.               *)
(***************************************************************************)
EXTENDS Membership

ChangesFollowWalMode == FALSE
=============================================================================
