------------------------------ MODULE SwimTrace ------------------------------
(***************************************************************************)
(* Trace validation of the SWIM core against Swim, as VClockReplicationTrace *)
(* does for replication: the deterministic simulator (replicaset/sim.py)   *)
(* runs each member's SWIM core in the member driver the server runs; the  *)
(* driver logs the spec's actions the core takes, the simulator the        *)
(* environment's.  specs/check_trace.py --spec Swim turns the log into     *)
(* TraceLog, one line per datagram:                                        *)
(*                                                                         *)
(*  - TickPing: member m sends peer n its entry for `about`; a message of  *)
(*    k updates is k datagrams (every message, ping, ack or ping-req, is   *)
(*    piggyback).  The entry sent must be the one m's view holds.          *)
(*  - PingReceived: m takes the datagram from n; then LoseAck drops the    *)
(*    spec's answer to it (the implementation's acks are messages of their *)
(*    own, logged as TickPing), and View compares m's whole view with the  *)
(*    spec's after the message's last datagram.                            *)
(*  - TickProbeFailed, TickDead: m suspects n, or declares it dead, at the *)
(*    incarnation the line names (the timeouts and the failed probe stay   *)
(*    hidden: the spec allows them whenever their state allows).           *)
(*  - Lose: the network dropped the datagram (a partition, a crashed       *)
(*    receiver, a full socket buffer, the seed).                           *)
(*  - Pause (a paused process, or a crash), Resume, Restart (a fresh core  *)
(*    at incarnation 0; View follows it).                                  *)
(*                                                                         *)
(* What stays existential: which failed probe was a false one (TLC checks  *)
(* the count against MaxFalse when the target runs).  The registry is      *)
(* fixed, as the simulator's is, and nobody joins or is removed.           *)
(*                                                                         *)
(* One refinement, for what the spec abstracts: its datagrams are a set,   *)
(* the network's a bag.  A datagram sent while an identical one is still   *)
(* in flight is the spec's TickPing of a datagram already there (a step    *)
(* that changes nothing); `copies` counts those extra copies, and taking   *)
(* or losing one of them takes the spec's step on the datagram but leaves *)
(* it in flight for the last copy (PingReceivedCopy).  Within one life of  *)
(* a view a copy never wins (a merge leaves the entry at or above the news *)
(* it took, and entries only grow), so a copy changes a view only across a *)
(* restart of its receiver.  The spec's invariants are checked on every    *)
(* state of the trace.                                                     *)
(***************************************************************************)
EXTENDS Swim, Bags, Sequences

CONSTANT TraceLog    \* <<[event |-> "TickPing", member |-> 1, peer |-> 2, ...], ...>>

VARIABLES
    l,               \* the next line of TraceLog to match
    copies           \* datagrams in flight more than once: the copies beyond one

traceVars == <<vars, l, copies>>

(* TLC evaluates a constant-level definition once: read the log here. *)
TheLog == TraceLog

Line == TheLog[l]

Sent == Datagram("ping", Line.member, Line.peer, Entry(Line.st, Line.inc), Line.about)
Got == Datagram("ping", Line.peer, Line.member, Entry(Line.st, Line.inc), Line.about)
One(d) == SetToBag({d})

(* PingReceived of datagram d, which stays in flight: another copy of it is. *)
PingReceivedCopy(m, d) ==
    /\ d \in msgs /\ d.kind = "ping" /\ d.to = m /\ status[m] = "up"
    /\ IF Runs(m) /\ ListensTo(m, d.from)
       THEN /\ Merge(m, [about |-> d.about, st |-> d.st, inc |-> d.inc])
            /\ msgs' = msgs \cup
                 IF view'[m][m].st # "removed" /\ view'[m][d.from].st # "removed"
                 THEN {Datagram("ack", m, d.from, view'[m][d.from], d.from)}
                 ELSE {}
       ELSE UNCHANGED <<msgs, view, incMax, accused>>
    /\ UNCHANGED <<status, removed, falses, pauses, lossy>>

Step ==
    CASE Line.event = "TickPing" ->
            /\ view[Line.member][Line.about] = Entry(Line.st, Line.inc)
            /\ copies' = IF Sent \in msgs THEN copies (+) One(Sent) ELSE copies
            /\ TickPing(Line.member, Line.peer, Line.about)
      [] Line.event = "PingReceived" ->
            IF BagIn(Got, copies)
            THEN PingReceivedCopy(Line.member, Got) /\ copies' = copies (-) One(Got)
            ELSE /\ Got \in msgs
                 /\ PingReceived(Line.member)
                 /\ Got \notin msgs'
                 /\ UNCHANGED copies
      [] Line.event = "LoseAck" ->
            /\ IF \E d \in msgs : d.kind = "ack"
               THEN Lose /\ \A d \in msgs' : d.kind # "ack"
               ELSE UNCHANGED vars
            /\ UNCHANGED copies
      [] Line.event = "Lose" ->
            IF BagIn(Got, copies)
            THEN UNCHANGED vars /\ copies' = copies (-) One(Got)
            ELSE Got \in msgs /\ Lose /\ Got \notin msgs' /\ UNCHANGED copies
      [] Line.event = "TickProbeFailed" ->
            /\ TickProbeFailed(Line.member, Line.peer)
            /\ view'[Line.member][Line.peer].inc = Line.inc
            /\ UNCHANGED copies
      [] Line.event = "TickDead" ->
            /\ TickDead(Line.member, Line.peer)
            /\ view'[Line.member][Line.peer].inc = Line.inc
            /\ UNCHANGED copies
      [] Line.event = "Pause" -> Pause(Line.member) /\ UNCHANGED copies
      [] Line.event = "Resume" -> Resume(Line.member) /\ UNCHANGED copies
      [] Line.event = "Restart" -> Restart(Line.member) /\ UNCHANGED copies
      [] Line.event = "View" -> view[Line.member] = Line.view /\ UNCHANGED <<vars, copies>>
      [] OTHER -> FALSE

(* Record the furthest line any behaviour matched, and say so once. *)
Matched ==
    IF l > TLCGet(1) THEN TLCSet(1, l) /\ PrintT(<<"matched", l>>) ELSE TRUE

TraceInit ==
    /\ Init
    /\ l = 1
    /\ copies = EmptyBag
    /\ TLCSet(1, 0)

TraceNext ==
    /\ l <= Len(TheLog)
    /\ Step
    /\ l' = l + 1
    /\ Matched

=============================================================================
