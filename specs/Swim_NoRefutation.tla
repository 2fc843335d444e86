------------------------ MODULE Swim_NoRefutation ------------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  News of oneself is merged like news of anyone else:  *)
(* a member told it is SUSPECT believes it, and nobody hears it refute.    *)
(* Swim_NoRefutation.cfg replaces Refute with TakeAsNews; TLC must report  *)
(* OwnViewAlive violated.                                                  *)
(***************************************************************************)
EXTENDS Swim

TakeAsNews(m, u) ==
    /\ view' = [view EXCEPT ![m][m] = Entry(u.st, Max(@.inc, u.inc))]
    /\ UNCHANGED incMax
=============================================================================
