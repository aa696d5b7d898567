/*
 * Promela model of the MCS queue lock with parked ULT waiters (base/lock/mcs.hpp:
 * mcs_enqueue, mcs_pass, mcs_release): can a queued ULT stay parked after the lock was
 * handed to it, or two processes hold the lock at once?
 *
 * A waiter swaps its node into the tail, links itself behind its predecessor and waits
 * for its status word to leave WAIT. A ULT waiter (it has a wake token) that spun out
 * moves its status from WAIT to PARKED with a CAS and parks: it is suspended until its
 * run-set bit is set, and re-checks its status after every wake-up. The releaser hands
 * the lock to its successor by exchanging the successor's status with GRANTED and, if the
 * old value was PARKED, unparks it (sets its run-set bit); a pthread waiter (no token)
 * gets a plain store. The run-set bit is a bit: a wake-up before the park is not lost
 * (the ULT runs again after it suspends). Both status accesses of the handshake are
 * read-modify-writes of one word, so sequential consistency is exact for it; the token
 * is read by the releaser before its exchange (published with the link), and the model
 * reads it there too.
 *
 * Processes: N lockers, ITERS acquisitions each; with -DPTHREAD, locker 0 is a pthread.
 * Checked by check_model.sh (safety run): mutual exclusion (assertion) and no invalid end
 * state (no waiter left parked or spinning for a hand-off that never comes). Deliberately
 * broken variants must fail, which shows the check has teeth:
 *   -DPARK_STORE: the waiter stores PARKED after it saw WAIT, instead of a CAS (it can
 *   overwrite the hand-off);
 *   -DPASS_STORE: the releaser reads the status, then stores GRANTED (a park in between
 *   is never unparked).
 */
#ifndef N
#define N 3
#endif
#ifndef ITERS
#define ITERS 2
#endif

#define NIL 255
#define LINKING 254
#define WAIT 0
#define GRANTED 1
#define PARKED 2

byte tail = NIL;
byte next[N];
byte status[N];
bool token[N];   /* a ULT: it may park */
bool runbit[N];  /* the ULT's run-set bit */
byte in_cs = 0;

proctype locker(byte i) {
    byte pred, succ, s;
    byte it = 0;
    do
    :: it < ITERS ->
        next[i] = NIL;
        status[i] = WAIT;
        atomic { pred = tail; tail = i };
        if
        :: pred != NIL ->
            next[pred] = i; /* with the token: published by this link */
            if
            :: !token[i] -> (status[i] != WAIT) /* a pthread spins (or yields) */
            :: token[i] ->
                if
                :: status[i] != WAIT -> skip /* seen while spinning */
                :: else -> /* spun out */
#ifdef PARK_STORE
                    s = status[i];
                    if
                    :: s == WAIT -> status[i] = PARKED
                    :: else -> skip
                    fi;
#else
                    atomic {
                        s = status[i];
                        if
                        :: s == WAIT -> status[i] = PARKED
                        :: else -> skip
                        fi
                    };
#endif
                    if
                    :: s == WAIT ->
                        do
                        :: atomic { runbit[i] -> runbit[i] = false }; /* park, woken */
                           if
                           :: status[i] != PARKED -> break
                           :: else -> skip /* spurious: park again */
                           fi
                        od
                    :: else -> skip
                    fi
                fi
            fi
        :: else -> skip
        fi;

        in_cs++;
        assert(in_cs == 1);
        in_cs--;

        succ = next[i];
        if
        :: succ == NIL ->
            atomic {
                if
                :: tail == i -> tail = NIL
                :: else -> succ = LINKING
                fi
            };
            if
            :: succ == LINKING -> (next[i] != NIL); succ = next[i]
            :: else -> skip
            fi
        :: else -> skip
        fi;
        if
        :: succ != NIL ->
            if
            :: !token[succ] -> status[succ] = GRANTED
            :: token[succ] ->
#ifdef PASS_STORE
                s = status[succ];
                status[succ] = GRANTED;
#else
                atomic { s = status[succ]; status[succ] = GRANTED };
#endif
                if
                :: s == PARKED -> runbit[succ] = true /* unpark */
                :: else -> skip
                fi
            fi
        :: else -> skip
        fi;
        it++
    :: else -> break
    od
}

init {
    byte i;
    atomic {
        i = 0;
        do
        :: i < N ->
            token[i] = true;
            i++
        :: else -> break
        od;
#ifdef PTHREAD
        token[0] = false;
#endif
        i = 0;
        do
        :: i < N -> run locker(i); i++
        :: else -> break
        od
    }
}
