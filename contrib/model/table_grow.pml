/*
 * Promela model of the growth of the matching table (matching/table.hpp: queue_guard,
 * relock, all_guard, lock_all, lock_bucket, grow): can a keyed access, or a walk under
 * every bucket lock, work on a bucket array after a grower copied it (an insert or pop
 * lost in a replaced array)?
 *
 * Arrays: generation g = 0 .. GROWS, array g has 1 << g buckets (the model grows 2x: the
 * factor plays no part), key k is in bucket k % (1 << g) of it; cur is table::array_.
 * A bucket's lock word is FREE, HELD or MOVED (detail::k_moved); cnt[g * KEYS + k] is the
 * length of key k's FIFO in array g.
 *
 * Processes:
 *   accessor(k), one per key: three queue_guards on key k (push_back, push_back,
 *     pop_front): load cur, lock the key's bucket in that array with a CAS from FREE to
 *     HELD; if the word is MOVED (the re-check), load cur again and start over in that
 *     array (relock); then assert that the array was not copied yet, apply the operation
 *     (a pop asserts that both pushes are there), unlock.
 *   walker: one all_guard: load cur, lock every bucket of that array in order; on a
 *     MOVED bucket, unlock those taken and start over in the array cur names now; assert
 *     that the array was not copied, unlock them all.
 *   sampler (-DSAMPLER): grow_if_full()'s load check: load cur, then for each bucket of that array
 *     try-lock it (a CAS from FREE to HELD, never waiting; held or MOVED: skipped), assert
 *     that the array was not copied while it holds the bucket (it reads the entries),
 *     unlock.
 *   grower: GROWS growths in a row (one grower at a time, as grow_lock_ makes it): lock
 *     every bucket of the current array in order, copy every key's FIFO to the next
 *     array, publish it in cur, leave the old buckets MOVED (-DNO_MARK: unlock them, as if
 *     the guards had no re-check to make).
 *   init: once all have finished, asserts that the last array is current and that each
 *     key holds exactly one node (push, push, pop).
 * Promela's interleavings are sequentially consistent; the real code gets the same order
 * for these steps from the acquire CAS and release stores of the lock words (MOVED
 * included) and from the release store of array_ paired with acquire loads (table.hpp).
 *
 * Checked by check_model.sh (safety run: the assertions and no invalid end state, which
 * would be a deadlock between the walker and the grower). -DNO_MARK, -DNO_RECHECK
 * (lock_bucket takes a MOVED bucket) and -DSAMPLE_MOVED (the sampler's try-lock takes
 * one) must fail.
 */
#ifndef GROWS
#define GROWS 1
#endif
#if GROWS == 1
#define NB 2 /* buckets of the largest array, 1 << GROWS (spin needs a literal) */
#elif GROWS == 2
#define NB 4
#else
#error "GROWS is 1 or 2"
#endif
#define KEYS 2
#define NARR (GROWS + 1)
#define FREE 0
#define HELD 1
#define MOVED 2

byte cur;              /* the current array (table::array_) */
byte lk[NARR * NB];    /* bucket lock words, array by array */
byte cnt[NARR * KEYS]; /* FIFO length of each key in each array */
bool copied[NARR];     /* the grower has copied this array (it is replaced) */
byte finished;

/* lock_bucket(): wait while HELD; ok = 1 when taken, 0 when MOVED (-DNO_RECHECK: take
 * a MOVED bucket like a free one, as spin_lock's exchange would if MOVED were 0). */
inline lock_bucket(g, b, ok)
{
    atomic {
        lk[(g) * NB + (b)] != HELD;
        if
        :: lk[(g) * NB + (b)] == FREE -> lk[(g) * NB + (b)] = HELD; ok = 1
#ifdef NO_RECHECK
        :: lk[(g) * NB + (b)] == MOVED -> lk[(g) * NB + (b)] = HELD; ok = 1
#else
        :: lk[(g) * NB + (b)] == MOVED -> ok = 0
#endif
        fi
    }
}

inline unlock(g, b)
{
    lk[(g) * NB + (b)] = FREE
}

proctype accessor(byte k)
{
    byte g, b, op;
    bool ok;
    do
    :: op == 3 -> break
    :: op < 3 ->
        g = cur;                              /* queue_guard(): load array_ */
        b = k % (1 << g);
        lock_bucket(g, b, ok);
        do                                    /* relock() */
        :: ok -> break
        :: !ok ->
            g = cur;
            b = k % (1 << g);
            lock_bucket(g, b, ok)
        od;
        assert(!copied[g]);
        if
        :: op < 2 -> cnt[g * KEYS + k]++       /* push_back */
        :: op == 2 ->                         /* pop_front: nothing was lost */
            assert(cnt[g * KEYS + k] == 2);
            cnt[g * KEYS + k]--
        fi;
        unlock(g, b);                         /* ~queue_guard() */
        op++
    od;
    finished++
}

proctype walker()
{
    byte g, b;
    bool ok;
    g = cur;                                  /* all_guard(): load array_ */
again:                                        /* lock_all() */
    b = 0;
    do
    :: b == (1 << g) -> break
    :: b < (1 << g) ->
        lock_bucket(g, b, ok);
        if
        :: ok -> b++
        :: !ok ->
            do
            :: b == 0 -> break
            :: b > 0 -> b--; unlock(g, b)
            od;
            g = cur;
            goto again
        fi
    od;
    assert(!copied[g]);                       /* for_each_queue() sees every key */
    b = 0;
    do
    :: b == (1 << g) -> break
    :: b < (1 << g) -> unlock(g, b); b++
    od;
    finished++
}

proctype sampler()
{
    byte g, b;
    bool ok;
    g = cur;                                  /* grow_if_full(): the guard's array */
    b = 0;
    do
    :: b == (1 << g) -> break
    :: b < (1 << g) ->
        atomic {                              /* compare_exchange_strong(FREE, HELD) */
            if
            :: lk[g * NB + b] == FREE -> lk[g * NB + b] = HELD; ok = 1
#ifdef SAMPLE_MOVED
            :: lk[g * NB + b] == MOVED -> lk[g * NB + b] = HELD; ok = 1
#endif
            :: else -> ok = 0
            fi
        }
        if
        :: ok ->
            assert(!copied[g]);               /* the entries it counts are live */
            unlock(g, b)
        :: else -> skip
        fi;
        b++
    od;
    finished++
}

proctype grower()
{
    byte g, b, k;
    bool ok;
    do
    :: g == GROWS -> break
    :: g < GROWS ->
        b = 0;                                /* lock_all(from): never MOVED here */
        do
        :: b == (1 << g) -> break
        :: b < (1 << g) -> lock_bucket(g, b, ok); assert(ok); b++
        od;
        k = 0;                                /* move every queue */
        do
        :: k == KEYS -> break
        :: k < KEYS -> cnt[(g + 1) * KEYS + k] = cnt[g * KEYS + k]; k++
        od;
        copied[g] = 1;
        cur = g + 1;                          /* publish: release store of array_ */
        b = 0;
        do
        :: b == (1 << g) -> break
        :: b < (1 << g) ->
#ifdef NO_MARK
            unlock(g, b);
#else
            lk[g * NB + b] = MOVED;           /* release store of k_moved */
#endif
            b++
        od;
        g++
    od;
    finished++
}

init
{
    byte k;
    atomic {
        run accessor(0);
        run accessor(1);
        run walker();
#ifdef SAMPLER
        run sampler();
#endif
        run grower()
    }
#ifdef SAMPLER
    finished == KEYS + 3;
#else
    finished == KEYS + 2;
#endif
    assert(cur == GROWS);
    k = 0;
    do
    :: k == KEYS -> break
    :: k < KEYS -> assert(cnt[cur * KEYS + k] == 1); k++
    od
}
