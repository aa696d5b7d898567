/*
 * Promela model of sync's owned mode (sched/sync.hpp, sched/sync.cpp) and the worker's
 * quiescence handshake (worker::quiesce / acknowledge, sched/worker.hpp): can a waiter
 * other than the owner miss its wake-up?
 *
 * The owner's worker thread W is modelled under x86-TSO: its plain stores (count_, ack_)
 * go to a FIFO store buffer that a separate process drains at any moment; its loads see
 * its own buffered stores first; a locked instruction (the run-set OR of a wake-up, the
 * CAS of a remote completion) waits for the buffer to drain. That is exactly where the
 * local signal's missing StoreLoad barrier matters. The other threads only use locked
 * instructions and loads, so they need no buffer.
 *
 * Processes:
 *   W: K passes, each an acknowledge() then a ULT run that signals the sync locally
 *      (load the remote word, load count_, store count_ + 1, wake the foreign waiter
 *      named in the remote word if this completed the sync); then idles, answering
 *      quiescence requests, until the waiter is done.
 *   R (with -DREMOTE): one remote completion (CAS on the remote word, then a wake-up of
 *      the foreign waiter it names).
 *   F: the foreign waiter (a ULT on another worker, or with -DPTHREAD a pthread asleep
 *      on the futex of the remote word): test, register (CAS), quiesce W, then loop:
 *      check, block until woken.
 * Two deliberately broken variants must fail (an invalid end state: F blocked for ever,
 * everyone else finished), which shows the check has teeth:
 *   -DNO_QUIESCE drops the handshake;
 *   -DWAKE_ON_COMPLETION_ONLY (with -DREMOTE) lets a local signal wake a foreign ULT only
 *   when its own view says it completed the sync: a remote completion landing between
 *   its load of the remote word and its store then leaves nobody to wake F.
 *
 * Checked by check_model.sh (safety run): no invalid end state (F always finishes), and
 * the assertion that F returns only once every completion is visible.
 */
#ifndef K
#define K 2
#endif
#ifdef REMOTE
#define ARMED (K + 1)
#else
#define ARMED K
#endif
#define BUF 4
#define A_COUNT 0
#define A_ACK 1

/* Memory. */
byte count = 0;        /* sync::count_ (local completions) */
byte remote = 0;       /* sync::waiter_: remote completions ... */
bool foreign = false;  /* ... and the foreign-waiter flag */
byte ack_req = 0;      /* worker::ack_req_ */
byte ack = 0;          /* worker::ack_ */
bool woken = false;    /* F's wake-up: its run-set bit, or the futex wake of a sleeper */
bool asleep = false;   /* PTHREAD: F is in FUTEX_WAIT */
bool f_done = false;

/* W's store buffer: FIFO of (address, value). */
byte baddr[BUF];
byte bval[BUF];
byte bhead = 0;
byte btail = 0;

inline w_store(a, v) {
    atomic {
        assert(btail - bhead < BUF);
        baddr[btail % BUF] = a;
        bval[btail % BUF] = v;
        btail++
    }
}

/* W's load of count or ack: the newest buffered store to it, else memory. */
inline w_load(a, out) {
    atomic {
        byte i = btail;
        bool hit = false;
        do
        :: i == bhead -> break
        :: else ->
            i--;
            if
            :: baddr[i % BUF] == a -> out = bval[i % BUF]; hit = true; break
            :: else -> skip
            fi
        od;
        if
        :: !hit && a == A_COUNT -> out = count
        :: !hit && a == A_ACK -> out = ack
        :: else -> skip
        fi
    }
}

/* A wake-up of F (the signaller's locked run-set OR, or futex_wake). */
inline wake_f() {
#ifdef PTHREAD
    atomic { if :: asleep -> woken = true :: else -> skip fi }
#else
    woken = true
#endif
}

active proctype drain() {
end:
    do
    :: atomic {
        bhead != btail ->
        if
        :: baddr[bhead % BUF] == A_COUNT -> count = bval[bhead % BUF]
        :: else -> ack = bval[bhead % BUF]
        fi;
        bhead++
       }
    od
}

active proctype W() {
    byte seen = 0;   /* worker::ack_seen_ */
    byte pass = 0;
    byte req, l, r;
    bool fr;
    do
    :: pass < K ->
        /* acknowledge() */
        req = ack_req;
        if
        :: req != seen -> seen = req; w_store(A_ACK, req)
        :: else -> skip
        fi;
        /* a ULT run: sync::signal(), local path */
        atomic { r = remote; fr = foreign };
        w_load(A_COUNT, l);
        assert(l + r < ARMED);
#ifdef PTHREAD
        if
        :: fr ->
            /* a foreign pthread: complete through the remote word (a locked CAS) */
            (bhead == btail);
            atomic { r = remote; remote = r + 1 };
            wake_f()
        :: else ->
            w_store(A_COUNT, l + 1)
        fi;
#else
        w_store(A_COUNT, l + 1);
#ifdef WAKE_ON_COMPLETION_ONLY
        if
        :: fr && l + r + 1 == ARMED -> (bhead == btail); wake_f()
        :: else -> skip
        fi;
#else
        /* a foreign ULT is woken after every local completion: a remote completion
           may have landed since the load above, making this one the last */
        if
        :: fr -> (bhead == btail); wake_f()
        :: else -> skip
        fi;
#endif
#endif
        pass++
    :: else -> break
    od;
    /* Idle: answer quiescence requests until the waiter is done. */
end_idle:
    do
    :: ack_req != seen -> req = ack_req; seen = req; w_store(A_ACK, req)
    :: f_done -> break
    od
}

#ifdef REMOTE
active proctype R() {
    bool fr;
    atomic { fr = foreign; remote = remote + 1 };
    if
    :: fr -> wake_f()
    :: else -> skip
    fi
}
#endif

active proctype F() {
    byte ticket, l, r;
    if
    :: count + remote >= ARMED -> goto finished
    :: else -> skip
    fi;
    foreign = true;  /* the registration CAS */
#ifndef NO_QUIESCE
    atomic { ack_req++; ticket = ack_req };
    (ack >= ticket);
#endif
check:
#ifdef PTHREAD
    r = remote;  /* the pthread loop reads the remote word first (its futex value) */
    l = count;
#else
    l = count;   /* test(): count_, then the remote word */
    r = remote;
#endif
    if
    :: l + r >= ARMED -> goto finished
    :: else -> skip
    fi;
#ifdef PTHREAD
    /* FUTEX_WAIT on the remote word's high half: sleeps only if it is unchanged */
    atomic {
        if
        :: remote == r -> asleep = true
        :: else -> goto check
        fi
    };
    (woken);
    atomic { woken = false; asleep = false };
#else
    (woken);
    woken = false;
#endif
    goto check;
finished:
    assert(count + remote >= ARMED);
    f_done = true
}
