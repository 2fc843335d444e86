-------------------------------- MODULE Swim --------------------------------
(***************************************************************************)
(* SWIM membership (docs/design/README.md §4.8): what each member believes *)
(* of the others.  The core is replicaset/core/swim.py; actions carry its  *)
(* event names (docs/design/swim.md maps them).                            *)
(*                                                                         *)
(* Every member holds a view: for each member a state and an incarnation.  *)
(* Its own entry is ALIVE (JOINING until it caught up) at its own          *)
(* incarnation, which only it raises.  A probe that fails (the target is   *)
(* down, or datagrams were lost: the indirect probe and the random order   *)
(* are abstracted into one nondeterministic step) makes the target SUSPECT *)
(* at the incarnation held; a suspicion may become DEAD at any time (the   *)
(* timeouts are abstracted).  Datagrams carry one entry of the sender's    *)
(* view each (a message with k updates is k datagrams delivered together), *)
(* may be lost, and wait in flight while their receiver is paused, so      *)
(* stale news arrives.  A ping is answered with an ack carrying the        *)
(* receiver's entry for the sender, so an accused member hears of it.      *)
(*                                                                         *)
(* Rules the implementation follows (each wrong variant replaces one):     *)
(*  1. Wins: news wins over a held entry when its incarnation is higher,   *)
(*     or, at an equal one, when it escalates ALIVE < JOINING < SUSPECT <  *)
(*     DEAD; REMOVED wins at any incarnation and nothing wins over it.     *)
(*  2. Refute: a member that receives news of itself that wins over its    *)
(*     own entry takes an incarnation above it (unless it is a removal,    *)
(*     which it accepts: it goes silent).                                  *)
(*  3. A member listens to no one it holds REMOVED, and a removed member   *)
(*     says nothing.                                                       *)
(*                                                                         *)
(* Members pause (a process stopped, or a crash before its restart) and    *)
(* resume with their state, or restart with a fresh view and incarnation 0 *)
(* (the incarnation need not be persisted: rule 2 takes a restarted member *)
(* above whatever the others hold).  An operator removes a member; each    *)
(* member learns it from the registry (Removed) or by gossip.  The         *)
(* registry is fixed otherwise (members_changed is not modelled).          *)
(*                                                                         *)
(* A merge touches one entry, so entries for different members never       *)
(* interact but through rule 3.  The runs follow the Subjects: only they   *)
(* pause, are suspected, join or are removed, and datagrams carry only     *)
(* their entries; the other members observe (one subject in CI, two in    *)
(* the deep run).                                                          *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS
    Members,      \* instance ids (model values)
    Subjects,     \* the members that may pause, be suspected, removed or join
    Joiners,      \* members that start JOINING
    MaxMsgs,      \* datagrams in flight at once
    MaxFalse,     \* probes that fail although their target is up (loss)
    MaxPauses,    \* pauses (each ends with Resume or Restart, or never)
    MaxRemovals   \* operator removals

ASSUME Subjects \subseteq Members /\ Joiners \subseteq Subjects
ASSUME {MaxMsgs, MaxFalse, MaxPauses, MaxRemovals} \subseteq Nat

Rank == [alive |-> 0, joining |-> 1, suspect |-> 2, dead |-> 3, removed |-> 4]
States == DOMAIN Rank
Live == {"alive", "joining"}
Accused == {"suspect", "dead"}
Entry(s, i) == [st |-> s, inc |-> i]
Max(a, b) == IF a > b THEN a ELSE b

VARIABLES
    view,      \* view[m][n]: m's entry for n; view[m][m] is m's own
    status,    \* status[m]: "up" | "paused"
    msgs,      \* datagrams in flight
    removed,   \* members the operator removed
    incMax,    \* ghost: the highest incarnation m ever took, in any life
    accused,   \* ghost: accused[m][n], the highest incarnation at which m's view
               \* held n SUSPECT or DEAD in m's current life (-1: never)
    falses,    \* probes failed with their target up, so far
    pauses,    \* pauses so far
    lossy      \* datagrams may still be lost (FALSE once the network healed)

vars == <<view, status, msgs, removed, incMax, accused, falses, pauses, lossy>>

-----------------------------------------------------------------------------
(* Rules the implementation follows; each wrong variant replaces one.      *)

(* Rule 1 (swim._wins and EQUAL_INCARNATION_MOVES). *)
Wins(held, u) ==
    /\ held.st # "removed"
    /\ \/ u.st = "removed"
       \/ u.inc > held.inc
       \/ u.inc = held.inc /\ Rank[u.st] > Rank[held.st]

(* Rule 2 (swim._news_of_self): m's answer to news u of itself that wins. *)
Refute(m, u) ==
    IF u.st = "removed"
    THEN /\ view' = [view EXCEPT ![m][m].st = "removed"]
         /\ UNCHANGED incMax
    ELSE /\ view' = [view EXCEPT ![m][m].inc = u.inc + 1]
         /\ incMax' = [incMax EXCEPT ![m] = Max(@, u.inc + 1)]

-----------------------------------------------------------------------------
(* m's view takes n's entry e; the ghost remembers an accusation. *)
Take(m, n, e) ==
    /\ view' = [view EXCEPT ![m][n] = e]
    /\ accused' = IF e.st \in Accused
                  THEN [accused EXCEPT ![m][n] = Max(@, e.inc)]
                  ELSE accused

(* m merges news u (swim._merge). *)
Merge(m, u) ==
    IF ~Wins(view[m][u.about], u)
    THEN UNCHANGED <<view, incMax, accused>>
    ELSE IF u.about = m
         THEN Refute(m, u) /\ UNCHANGED accused
         ELSE /\ Take(m, u.about, Entry(u.st, Max(view[m][u.about].inc, u.inc)))
              /\ UNCHANGED incMax

(* m runs: neither paused nor removed (a removed member says nothing). *)
Runs(m) == status[m] = "up" /\ view[m][m].st # "removed"

(* m listens to s (rule 3). *)
ListensTo(m, s) == s # m /\ view[m][s].st # "removed"

Datagram(kind, from, to, e, about) ==
    [kind |-> kind, from |-> from, to |-> to, about |-> about, st |-> e.st, inc |-> e.inc]

Datagrams ==
    [kind : {"ping", "ack"}, from : Members, to : Members, about : Members, st : States, inc : Nat]

Fresh(m) == [n \in Members |-> IF n \in removed THEN Entry("removed", 0) ELSE Entry("alive", 0)]

Init ==
    /\ view = [m \in Members |-> [n \in Members |->
                 IF m = n /\ n \in Joiners THEN Entry("joining", 0) ELSE Entry("alive", 0)]]
    /\ status = [m \in Members |-> "up"]
    /\ msgs = {}
    /\ removed = {}
    /\ incMax = [m \in Members |-> 0]
    /\ accused = [m \in Members |-> [n \in Members |-> -1]]
    /\ falses = 0
    /\ pauses = 0
    /\ lossy = TRUE

-----------------------------------------------------------------------------
(* Swim.tick *)

(* m pings n, piggybacking its entry for x. *)
TickPing(m, n, x) ==
    /\ Runs(m) /\ ListensTo(m, n) /\ x \in Subjects
    /\ Cardinality(msgs) < MaxMsgs
    /\ msgs' = msgs \cup {Datagram("ping", m, n, view[m][x], x)}
    /\ UNCHANGED <<view, status, removed, incMax, accused, falses, pauses, lossy>>

(* m's probe of n got no ack, direct or relayed, by the end of the period: *)
(* n does not run, or datagrams were lost (a false suspicion).             *)
TickProbeFailed(m, n) ==
    /\ Runs(m) /\ ListensTo(m, n) /\ n \in Subjects
    /\ view[m][n].st \in Live
    /\ IF Runs(n) THEN lossy /\ falses < MaxFalse /\ falses' = falses + 1 ELSE UNCHANGED falses
    /\ Take(m, n, Entry("suspect", view[m][n].inc))
    /\ UNCHANGED <<status, msgs, removed, incMax, pauses, lossy>>

(* A suspicion that lasted its timeouts. *)
TickDead(m, n) ==
    /\ Runs(m) /\ n # m
    /\ view[m][n].st = "suspect"
    /\ Take(m, n, Entry("dead", view[m][n].inc))
    /\ UNCHANGED <<status, msgs, removed, incMax, falses, pauses, lossy>>

(* Swim.ping_received: merge, and answer with our entry for the sender.   *)
(* A removed member takes the datagram and does nothing (rule 3).         *)
PingReceived(m) == \E d \in msgs :
    /\ d.kind = "ping" /\ d.to = m /\ status[m] = "up"
    /\ IF Runs(m) /\ ListensTo(m, d.from)
       THEN /\ Merge(m, [about |-> d.about, st |-> d.st, inc |-> d.inc])
            /\ msgs' = (msgs \ {d}) \cup
                 IF view'[m][m].st # "removed" /\ view'[m][d.from].st # "removed"
                 THEN {Datagram("ack", m, d.from, view'[m][d.from], d.from)}
                 ELSE {}
       ELSE /\ msgs' = msgs \ {d}
            /\ UNCHANGED <<view, incMax, accused>>
    /\ UNCHANGED <<status, removed, falses, pauses, lossy>>

(* Swim.ack_received: merge. *)
AckReceived(m) == \E d \in msgs :
    /\ d.kind = "ack" /\ d.to = m /\ status[m] = "up"
    /\ IF Runs(m) /\ ListensTo(m, d.from)
       THEN Merge(m, [about |-> d.about, st |-> d.st, inc |-> d.inc])
       ELSE UNCHANGED <<view, incMax, accused>>
    /\ msgs' = msgs \ {d}
    /\ UNCHANGED <<status, removed, falses, pauses, lossy>>

(* Swim.caught_up: JOINING ends at a new incarnation. *)
CaughtUp(m) ==
    /\ Runs(m) /\ view[m][m].st = "joining"
    /\ view' = [view EXCEPT ![m][m] = Entry("alive", @.inc + 1)]
    /\ incMax' = [incMax EXCEPT ![m] = Max(@, view[m][m].inc + 1)]
    /\ UNCHANGED <<status, msgs, removed, accused, falses, pauses, lossy>>

(* Swim.removed: m sees the operator's removal of x in the registry. *)
Removed(m, x) ==
    /\ Runs(m) /\ x \in removed
    /\ view[m][x].st # "removed"
    /\ IF x = m
       THEN view' = [view EXCEPT ![m][m].st = "removed"] /\ UNCHANGED accused
       ELSE Take(m, x, Entry("removed", view[m][x].inc))
    /\ UNCHANGED <<status, msgs, removed, incMax, falses, pauses, lossy>>

-----------------------------------------------------------------------------
(* The environment *)

Lose == \E d \in msgs :
    /\ lossy
    /\ msgs' = msgs \ {d}
    /\ UNCHANGED <<view, status, removed, incMax, accused, falses, pauses, lossy>>

Pause(m) ==
    /\ m \in Subjects /\ status[m] = "up" /\ pauses < MaxPauses /\ lossy
    /\ status' = [status EXCEPT ![m] = "paused"]
    /\ pauses' = pauses + 1
    /\ UNCHANGED <<view, msgs, removed, incMax, accused, falses, lossy>>

Resume(m) ==
    /\ status[m] = "paused"
    /\ status' = [status EXCEPT ![m] = "up"]
    /\ UNCHANGED <<view, msgs, removed, incMax, accused, falses, pauses, lossy>>

(* A crash ends: a new Swim, its view from the registry, incarnation 0. *)
Restart(m) ==
    /\ status[m] = "paused"
    /\ status' = [status EXCEPT ![m] = "up"]
    /\ view' = [view EXCEPT ![m] = Fresh(m)]
    /\ accused' = [accused EXCEPT ![m] = [n \in Members |-> -1]]
    /\ UNCHANGED <<msgs, removed, incMax, falses, pauses, lossy>>

(* The operator removes x (a quorum write of _cluster). *)
Remove(x) ==
    /\ x \in Subjects /\ x \notin removed /\ Cardinality(removed) < MaxRemovals
    /\ removed' = removed \cup {x}
    /\ UNCHANGED <<view, status, msgs, incMax, accused, falses, pauses, lossy>>

(* From now on no datagram is lost and nobody pauses. *)
Heal ==
    /\ lossy
    /\ lossy' = FALSE
    /\ UNCHANGED <<view, status, msgs, removed, incMax, accused, falses, pauses>>

Next ==
    \/ \E m, n, x \in Members : TickPing(m, n, x)
    \/ \E m, n \in Members : TickProbeFailed(m, n) \/ TickDead(m, n) \/ Removed(m, n)
    \/ \E m \in Members : CaughtUp(m) \/ Pause(m) \/ Resume(m) \/ Restart(m) \/ Remove(m)
    \/ \E m \in Members : PingReceived(m) \/ AckReceived(m)
    \/ Lose
    \/ Heal

Spec == Init /\ [][Next]_vars

(* Datagrams in flight are delivered; every member keeps pinging every     *)
(* other with every entry it holds (the core sends its own entry in every  *)
(* message and the receiver's accusation, and gossips each change).        *)
Fairness ==
    /\ WF_vars(Heal)
    /\ \A m \in Members : WF_vars(PingReceived(m)) /\ WF_vars(AckReceived(m))
    /\ \A m, n \in Members, x \in Subjects : SF_vars(TickPing(m, n, x))

LiveSpec == Spec /\ Fairness

(* For the safety runs: a healed network only takes faults away, so every  *)
(* state after Heal is one before it with another flag.                    *)
Lossy == lossy

Symmetry == Permutations(Members \ Subjects)

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ view \in [Members -> [Members -> [st : States, inc : Nat]]]
    /\ status \in [Members -> {"up", "paused"}]
    /\ msgs \subseteq Datagrams
    /\ removed \subseteq Members

(* A member never holds itself SUSPECT or DEAD. *)
OwnViewAlive == \A m \in Members : view[m][m].st \in Live \cup {"removed"}

(* Only a member raises its own incarnation: no view and no datagram holds *)
(* an incarnation of n that n never took.                                  *)
OnlySelfRaises ==
    /\ \A m, n \in Members : view[m][n].inc <= incMax[n]
    /\ \A d \in msgs : d.inc <= incMax[d.about]

(* A view that held n SUSPECT or DEAD at incarnation i believes n alive    *)
(* again only at an incarnation above i: news that n made after it was     *)
(* accused (only n raises its incarnation), never a stale ALIVE.           *)
NoStaleRevival ==
    \A m, n \in Members : m # n /\ view[m][n].st \in Live => view[m][n].inc > accused[m][n]

(* Only the operator removes. *)
RemovedByOperator ==
    /\ \A m, n \in Members : view[m][n].st = "removed" => n \in removed
    /\ \A d \in msgs : d.st = "removed" => d.about \in removed

(* Properties of steps: within one life of a view, incarnations only grow, *)
(* and REMOVED is final.                                                   *)
Restarts(m) == status[m] = "paused" /\ status'[m] = "up"
IncarnationsGrow ==
    [][\A m, n \in Members : ~Restarts(m) => view'[m][n].inc >= view[m][n].inc]_vars
RemovedFinal ==
    [][\A m, n \in Members : view[m][n].st = "removed" => view'[m][n].st = "removed"]_vars

(* Liveness: once datagrams are no longer lost, every running member that *)
(* was not removed is eventually, and stays, alive in every running view.  *)
EventuallyAlive ==
    <>[](\A m, n \in Members : Runs(m) /\ Runs(n) /\ n \notin removed => view[m][n].st \in Live)

=============================================================================
