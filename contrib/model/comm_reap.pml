/*
 * Promela model of freeing a destroyed communicator while other threads drain the inbound
 * queues (endpoints/engine.cpp: comm_destroy, reap, handle; endpoints/shm/mpsc_queue.hpp:
 * try_lock, unlock, drain_mark, drained_since): can a drain use a communicator's state
 * after it was freed?
 *
 * A drain takes the queue's drain lock, loads the communicator pointer of a message and,
 * if it is set, uses the state; then it counts itself (drains) and releases the lock. The
 * destroyer clears the pointer, takes a mark (the lock word first: free means "idle",
 * else the drain count), and frees the state once the mark has passed (idle, or the count
 * is beyond it). Promela's interleavings are sequentially consistent, as the seq_cst
 * operations of the clearing, the lock exchange, the mark's lock load and the pointer load
 * make the real code on that path; the drain count is read with acquire after the lock
 * load that saw the running drain's exchange.
 *
 * Processes: DRAINERS drainer threads doing ROUNDS drains each, one destroyer, whose
 * reap frees the state whenever its mark has passed (a reap that never finds it passed
 * keeps it: no error). Checked by check_model.sh (safety run): the assertion that no drain
 * uses freed state. -DNO_MARK (free at once after clearing) must fail.
 */
#ifndef DRAINERS
#define DRAINERS 2
#endif
#ifndef ROUNDS
#define ROUNDS 2
#endif
#define IDLE 255

bool lock;      /* the queue's drain lock */
byte drains;    /* drains that held the lock and ended */
bool set = 1;   /* the communicator pointer is set */
bool freed;     /* the state was freed */

active [DRAINERS] proctype drainer()
{
    byte r = 0;
    bool mine;
    do
    :: r == ROUNDS -> break
    :: r < ROUNDS ->
        atomic { !lock -> lock = 1 }          /* try_lock until it succeeds */
        mine = set;                           /* handle(): load the pointer */
        if
        :: mine -> assert(!freed)             /* arrive() uses the state */
        :: else -> skip                       /* pending list instead */
        fi;
        drains++;                             /* unlock(): count, then release */
        lock = 0;
        r++
    od
}

active proctype destroyer()
{
    byte mark;
    set = 0;                                  /* comm_destroy: clear the pointer */
#ifdef NO_MARK
    freed = 1
#else
    if                                        /* drain_mark() */
    :: !lock -> mark = IDLE
    :: else -> mark = drains
    fi;
    do                                        /* reap(), at each later call */
    :: mark == IDLE || drains > mark -> freed = 1; break
    :: timeout -> break                       /* never passed: kept, not freed */
    od
#endif
}
