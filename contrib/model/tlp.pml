/*
 * Promela model of mpiv::base::tlp_lock<High, Low> (base/lock/tlp.hpp; seed 004 Fig. 5).
 *
 * NH high-priority threads (lock()/try_lock()) and NL low-priority threads
 * (lock_low()/try_lock_low()) each make a bounded number of attempts. The sub-locks are
 * modelled as ticket locks; what the protocol needs from High is only mutual exclusion and
 * a no_waiters() that never reports "waiters" when there is none: the model answers
 * exactly when there is no waiter and nondeterministically (right or wrong "no waiters")
 * when there is one, so every implementation meeting that contract is covered.
 * Compile with -DBROKEN_NO_WAITERS to let no_waiters() also report "waiters" wrongly:
 * all_finish must then fail (the filter stays with the high class and a low-priority
 * thread starves), which shows the property has teeth.
 *
 * Checked by check_model.sh:
 *   - mutual exclusion: assertion in both critical sections;
 *   - priority: once a high-priority owner saw a high-priority waiter and kept the filter,
 *     the next thread to enter is high priority (assertion !high_kept in the low CS);
 *   - no deadlock: no invalid end state (safety run);
 *   - low-priority threads enter once high-priority traffic stops: every thread finishes
 *     (ltl all_finish), i.e. the low-priority ones get in after the bounded high-priority
 *     traffic ends.
 */
#ifndef NH
#define NH 2
#endif
#ifndef NL
#define NL 1
#endif
#ifndef ITERS
#define ITERS 2
#endif
#define MOD 8
#define HIGH 0
#define LOW 1
#define FILTER 2

byte next_ticket[3];
byte now_serving[3];
bool go_straight = false;
bool high_kept = false; /* the last high owner kept the filter for a waiter it saw */
byte in_cs = 0;
byte finished = 0;

/* Locals are reset once dead, so that they do not multiply the states. */
inline t_lock(l, mine)
{
    d_step { mine = next_ticket[l]; next_ticket[l] = (next_ticket[l] + 1) % MOD };
    atomic { now_serving[l] == mine -> mine = 0 }
}

inline t_try_lock(l, seen, ok)
{
    seen = now_serving[l];
    atomic {
        if
        :: next_ticket[l] == seen -> next_ticket[l] = (seen + 1) % MOD; ok = true
        :: else -> ok = false
        fi;
        seen = 0
    }
}

inline t_unlock(l)
{
    now_serving[l] = (now_serving[l] + 1) % MOD
}

/* High's no_waiters(), called by the High owner. */
inline high_no_waiters(r)
{
    if
    :: (next_ticket[HIGH] + MOD - now_serving[HIGH]) % MOD == 1 ->
#ifdef BROKEN_NO_WAITERS
        if
        :: r = true
        :: r = false
        fi
#else
        r = true
#endif
    :: else ->
        if
        :: r = true
        :: r = false
        fi
    fi
}

active [NH] proctype high()
{
    byte mine;
    byte seen;
    bool ok;
    bool none;
    byte i = 0;
    do
    :: i < ITERS ->
        if
        :: /* lock() */
            t_lock(HIGH, mine);
            if
            :: !go_straight -> t_lock(FILTER, mine); go_straight = true
            :: else -> skip
            fi;
            ok = true
        :: /* try_lock() */
            t_try_lock(HIGH, seen, ok);
            if
            :: ok && !go_straight ->
                t_try_lock(FILTER, seen, ok);
                if
                :: ok -> go_straight = true
                :: else -> t_unlock(HIGH)
                fi
            :: else -> skip
            fi
        fi;
        if
        :: ok ->
            in_cs++;
            assert(in_cs == 1);
            high_kept = false;
            in_cs--;
            /* unlock() */
            high_no_waiters(none);
            if
            :: none -> go_straight = false; t_unlock(FILTER)
            :: else -> high_kept = true
            fi;
            t_unlock(HIGH)
        :: else -> skip
        fi;
        i++
    :: else -> break
    od;
    finished++
}

active [NL] proctype low()
{
    byte mine;
    byte seen;
    bool ok;
    byte i = 0;
    do
    :: i < ITERS ->
        if
        :: /* lock_low() */
            t_lock(LOW, mine); t_lock(FILTER, mine); ok = true
        :: /* try_lock_low() */
            t_try_lock(LOW, seen, ok);
            if
            :: ok ->
                t_try_lock(FILTER, seen, ok);
                if
                :: !ok -> t_unlock(LOW)
                :: else -> skip
                fi
            :: else -> skip
            fi
        fi;
        if
        :: ok ->
            in_cs++;
            assert(in_cs == 1);
            assert(!high_kept);
            in_cs--;
            /* unlock_low() */
            t_unlock(FILTER);
            t_unlock(LOW)
        :: else -> skip
        fi;
        i++
    :: else -> break
    od;
    finished++
}

ltl all_finish { <> (finished == NH + NL) }
