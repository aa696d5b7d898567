/*
 * Promela model of the ULT poller hand-over (endpoints/engine_wait.cpp: engine::wait_end's
 * ULT branch, engine::ensure_poller, engine::poller_main): can a ULT block waiting for
 * progress while no poller runs on its worker?
 *
 * A waiting ULT increments ult_waiters_, then makes sure a poller runs: it loads
 * poller_on_ and, only when it is clear, exchanges it with true and starts a poller if it
 * was the one to set it. The poller drives progress while ult_waiters_ is nonzero; to
 * leave, it clears poller_on_, loads ult_waiters_ again and leaves if it is zero or if
 * its exchange of poller_on_ back to true finds another poller already started. Every
 * access is seq_cst, so the model's interleavings (sequential consistency) are exact.
 *
 * Processes: W waiters, each waiting ROUNDS times (a round ends when a poller has made
 * progress for it), and the pollers they start. Checked by check_model.sh (safety run):
 * no invalid end state, i.e. no waiter is left blocked with no poller to serve it.
 * One deliberately broken variant must fail, which shows the check has teeth:
 *   -DLOOK_FIRST: a waiter looks at poller_on_ before its increment (a poller leaving in
 *   between sees no waiter, and the waiter saw it still on).
 */
#ifndef W
#define W 2
#endif
#ifndef ROUNDS
#define ROUNDS 2
#endif

byte ult_waiters = 0;
bool poller_on = false;
bool waiting[W];
bool served[W];

proctype poller() {
    byte i;
    bool was;
    do
    :: /* one round of progress: serves every waiting ULT */
        atomic {
            i = 0;
            do
            :: i < W -> if :: waiting[i] -> served[i] = true :: else -> skip fi; i++
            :: else -> break
            od;
            i = 0
        };
        if
        :: ult_waiters == 0 ->
            poller_on = false;
            if
            :: ult_waiters == 0 -> break
            :: else ->
                atomic { was = poller_on; poller_on = true };
                if
                :: was -> break /* another poller took over */
                :: else -> skip
                fi
            fi
        :: else -> skip
        fi
    od;
}

inline ensure_poller(was) {
    if
    :: poller_on -> skip
    :: else ->
        atomic {
            was = poller_on;
            poller_on = true;
            if
            :: !was -> run poller()
            :: else -> skip
            fi
        }
    fi
}

active [W] proctype waiter() {
    byte r = 0;
    bool was;
    do
    :: r < ROUNDS ->
        waiting[_pid] = true;
#ifdef LOOK_FIRST
        if
        :: poller_on -> ult_waiters++
        :: else -> ult_waiters++; ensure_poller(was)
        fi;
#else
        ult_waiters++;
        ensure_poller(was);
#endif
        served[_pid];              /* blocks until a poller served it */
        atomic { waiting[_pid] = false; served[_pid] = false };
        ult_waiters--;
        r++
    :: else -> break
    od
}
