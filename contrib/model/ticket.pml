/*
 * Promela model of mpiv::base::ticket_lock (base/lock/ticket.hpp).
 *
 * N threads each make ITERS attempts, each attempt a lock() or a try_lock() chosen
 * nondeterministically. Counters wrap modulo MOD (> N), as the 32-bit counters of the
 * implementation wrap modulo 2^32. Waiting loops are blocking guards, and the model is
 * sequentially consistent: it checks the protocol, not the C++ memory orders.
 *
 * Checked by check_model.sh:
 *   - mutual exclusion: the assertion in the critical section;
 *   - no deadlock: no invalid end state (safety run);
 *   - every thread finishes (starvation freedom for bounded runs): ltl all_finish.
 */
#ifndef N
#define N 3
#endif
#ifndef ITERS
#define ITERS 2
#endif
#define MOD 8

byte next_ticket = 0;
byte now_serving = 0;
byte in_cs = 0;
byte finished = 0;

/* lock(): fetch_add on next_ticket, then wait for now_serving to reach the ticket. */
inline ticket_lock(mine)
{
    d_step { mine = next_ticket; next_ticket = (next_ticket + 1) % MOD };
    atomic { now_serving == mine -> mine = 0 }
}

/* try_lock(): load now_serving, then CAS next_ticket from that value to the next one. */
inline ticket_try_lock(seen, ok)
{
    seen = now_serving;
    atomic {
        if
        :: next_ticket == seen -> next_ticket = (seen + 1) % MOD; ok = true
        :: else -> ok = false
        fi;
        seen = 0
    }
}

/* unlock(): only the owner writes now_serving (load, then store). */
inline ticket_unlock(seen)
{
    seen = now_serving;
    atomic { now_serving = (seen + 1) % MOD; seen = 0 }
}

active [N] proctype thread()
{
    byte mine;
    byte seen;
    bool ok;
    byte i = 0;
    do
    :: i < ITERS ->
        if
        :: ticket_lock(mine); ok = true
        :: ticket_try_lock(seen, ok)
        fi;
        if
        :: ok ->
            in_cs++;
            assert(in_cs == 1);
            in_cs--;
            ticket_unlock(seen)
        :: else -> skip
        fi;
        i++
    :: else -> break
    od;
    finished++
}

ltl all_finish { <> (finished == N) }
