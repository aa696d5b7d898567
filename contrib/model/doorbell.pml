/*
 * Promela model of the shared-memory doorbell (endpoints/shm/transport.hpp, ring();
 * endpoints/engine_wait.cpp, engine::doze()): can the progress owner fall asleep on its
 * doorbell while a message waits in its queue, with no one left to ring?
 *
 * A sender pushes a message (plain stores into a queue slot) and then rings: it loads
 * the receiver's `sleeping` count and, when it is nonzero, increments the doorbell (a
 * locked instruction) and wakes the futex. The receiver's owner, finding its queues
 * empty, dozes: it reads the doorbell, increments `sleeping` (locked), checks its queues
 * once more and sleeps on the doorbell while it still has the value read first. This is
 * a Dekker pair: each side stores, then loads what the other stores.
 *
 * Senders are modelled under x86-TSO: a slot store goes into the sender's FIFO store
 * buffer and becomes visible when a separate drain process (or a locked instruction of
 * the sender) empties it; the sender's load of `sleeping` reads memory at once and may
 * pass its own buffered slot stores. The receiver only uses locked instructions and
 * loads, so it needs no buffer.
 *
 * Two ways to order the sender's store and load:
 *   - default (light ring, what mpiv does where membarrier(2) works): the sender has a
 *     compiler barrier only; the receiver, after its increment, makes a heavy barrier
 *     (membarrier GLOBAL_EXPEDITED), which runs a full barrier on every sender's CPU: all
 *     the senders' buffered stores become visible. The heavy barrier may also fail
 *     (nondeterministic here); then the receiver does not sleep.
 *   - -DFENCE: the sender makes a full fence (its buffer drains) before its load; the
 *     receiver makes no heavy barrier.
 * One deliberately broken variant must fail, which shows the check has teeth:
 *   -DNO_HEAVY: light senders and no heavy barrier (the receiver may sleep through a
 *   message its check did not see yet, and the sender saw no sleeper).
 *
 * Checked by check_model.sh (safety run): no invalid end state, i.e. the receiver always
 * takes every message (the futex timeout of the real code, a safety net, is not
 * modelled: the receiver may block for ever).
 */
#ifndef NS
#define NS 2        /* senders */
#endif
#ifndef M
#define M 2         /* messages per sender */
#endif
#define TOTAL (NS * M)

byte visible = 0;   /* messages whose slot stores reached memory */
byte buffered[NS];  /* slot stores still in each sender's store buffer */
byte sleeping = 0;  /* the receiver header's `sleeping` */
byte doorbell = 0;  /* the receiver header's futex word */

/* A locked instruction or a full fence of sender s: its store buffer drains first. */
inline drained(s) { buffered[s] == 0 }

/* The heavy barrier: a full barrier on every sender's CPU, so every buffered store
 * becomes visible. */
inline heavy_barrier(k) {
    atomic {
        k = 0;
        do
        :: k < NS -> visible = visible + buffered[k]; buffered[k] = 0; k++
        :: else -> break
        od;
        k = 0
    }
}

active [NS] proctype drain() {
end:
    do
    :: atomic { buffered[_pid] > 0 -> buffered[_pid]--; visible++ }
    od
}

active [NS] proctype sender() {
    byte s = _pid - NS; /* drain() took pids 0 .. NS - 1 */
    byte i = 0;
    do
    :: i < M ->
        buffered[s]++; /* the message's slot stores */
#ifdef FENCE
        drained(s);
#endif
        if
        :: sleeping != 0 -> atomic { drained(s) -> doorbell++ } /* then futex_wake */
        :: else -> skip
        fi;
        i++
    :: else -> break
    od
}

active proctype receiver() {
    byte got = 0;
    byte seen, k;
    bool sleep_ok;
    do
    :: got == TOTAL -> break
    :: got < TOTAL && visible > got -> got++ /* pop */
    :: got < TOTAL && visible == got ->
        /* doze() */
        seen = doorbell;
        sleeping++;
        sleep_ok = true;
#if !defined(FENCE) && !defined(NO_HEAVY)
        if
        :: heavy_barrier(k)
        :: sleep_ok = false /* membarrier failed: poll again instead of sleeping */
        fi;
#endif
        if
        :: sleep_ok && visible == got ->
            /* futex_wait(doorbell, seen): returns once the value differs */
            doorbell != seen
        :: else -> skip
        fi;
        sleeping--;
        sleep_ok = false
    od;
    assert(visible == TOTAL)
}
