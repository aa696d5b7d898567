/*
 * Promela model of a try-lock whose word names its holder (endpoints/shm/mpsc_queue.hpp:
 * try_lock, unlock, held_by, the consumer lock of an inbound queue; endpoints/ucx/
 * transport.cpp: the same for a UCX worker's lock). Drains, polls and posts on endpoints
 * handles ask held_by(self) to know whether they hold the lock already (a completion
 * inside a drain that posts on that queue's handle): is the answer exact while other
 * contexts try to take the lock at any moment?
 *
 * Each context has its own identity (its ULT or thread: 1..N here). try_lock tests the
 * word first (a relaxed load: held means fail at once), then compare-exchanges 0 for its
 * identity; unlock stores 0. Promela's interleavings are sequentially consistent; the
 * question here is what the word holds, not ordering.
 *
 * Processes: N contexts doing ROUNDS attempts each. Checked by check_model.sh (safety
 * run): mutual exclusion, held_by(self) true all through a hold and false outside one.
 * -DEXCHANGE (a failed attempt that exchanges its identity in, as a plain test-and-set
 * on the word would) must fail: it overwrites the holder's name.
 */
#ifndef N
#define N 3
#endif
#ifndef ROUNDS
#define ROUNDS 2
#endif

byte word;   /* 0: free; else the holder's identity */
byte inside; /* contexts inside a hold */

active [N] proctype context()
{
    byte me = _pid + 1;
    byte r = 0;
    byte seen;
    do
    :: r == ROUNDS -> break
    :: r < ROUNDS ->
        assert(word != me);                       /* held_by(me) outside a hold */
        seen = word;                              /* the test before the swap */
        if
        :: seen != 0 -> skip                      /* held: the try fails */
        :: else ->
#ifdef EXCHANGE
            atomic { seen = word; word = me };
#else
            atomic {
                seen = word;
                if
                :: word == 0 -> word = me
                :: else -> skip
                fi
            };
#endif
            if
            :: seen == 0 ->
                inside++;
                assert(word == me);               /* held_by(me) in the hold */
                assert(inside == 1);              /* one holder */
                inside--;
                assert(word == me);               /* held_by(me) until the release */
                word = 0                          /* unlock() */
            :: else -> skip                       /* someone else holds it */
            fi
        fi;
        r++
    od
}
