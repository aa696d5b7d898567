/*
 * Promela model of context-id agreement for endpoints communicators: Gropp and Thakur's
 * algorithm (seed 001, Fig. 3: a mask of free ids per process, a local lock with
 * mask_in_use and lowestContextId, an allreduce (AND) of the masks, retry) with the
 * endpoint ranks of a process taking part as one: they meet first, and the last to arrive
 * runs the algorithm for all of them (ompi-component/pml_mpiv_endpoints_ops.c: the handles
 * meet by call number, one of them builds the communicator over proc_comm, where
 * mpiv_cid_agree, base/cid.cpp, runs this algorithm once per process: in_use is its gate,
 * lowest its lowest waiting key). base/cid.cpp adds a second collective that confirms the
 * id in Open MPI's table (where Open MPI's own agreement for other communicators may take
 * it meanwhile); the model leaves that out, as it has no other user of the ids.
 *
 * Two processes; two communicators A and B (input ids 1 and 2, both spanning both
 * processes) are duplicated at the same time; process 0 has E endpoint threads on A (they
 * meet), every other (process, communicator) one (a smaller state space; the meeting is
 * the same).
 * Ids are bits 0..3 of the masks. Checked:
 *   - safety run: every endpoint of a communicator gets the same id on every process, A's
 *     and B's differ, and nothing deadlocks;
 *   - liveness run under weak fairness (the ltl claim below; pan -a -f): every endpoint
 *     ends. Fairness is needed: a round of B that holds a process's mask while its other
 *     process is not scheduled makes A's rounds fail for as long as that lasts.
 *
 * Broken variants, which must fail:
 *   -DEACH_ENDPOINT  every endpoint thread runs the algorithm itself (as Open MPI's own
 *                    nextcid would over an endpoints handle): the siblings of a process
 *                    compete for its mask and one of them contributes zeros every round:
 *                    the liveness run finds a fair cycle where nothing ends;
 *   -DNO_LOCAL_LOCK  no mask_in_use / lowestContextId gate: two communicators of one
 *                    process take the same free id (safety);
 *   -DNO_RETRY       a round whose AND is zero (a mask was busy) gives up (safety).
 */
#define NP 2
#define NC 2
#ifndef E
#define E 2
#endif
#define NONE 255
#define EPS(p, c) (((p) == 0 && (c) == 0) -> E : 1) /* endpoint threads of p on c */
#define ALL (E + NP * NC - 1)                     /* endpoint threads in all */
#ifdef EACH_ENDPOINT
#define PARTS(c) (((c) == 0) -> E + NP - 1 : NP) /* every endpoint takes part */
#else
#define PARTS(c) NP                               /* one participant per process */
#endif

byte mask[NP] = 15;   /* free ids: bits 0..3 */
bool in_use[NP];
byte lowest[NP] = NONE;
/* allreduce (AND) per communicator, by generation */
byte arrived[NC];
byte acc[NC];
byte result[NC];
bit gen[NC];   /* flips per round: a participant waits for the flip after its deposit, and
                  the next round cannot complete before it deposits again */
/* the endpoints' meeting per process and communicator */
byte met[NP * NC];
byte agreed[NP * NC];  /* the id the process's participant got (0: none yet) */
bool published[NP * NC];
byte got[NP * NC * E]; /* the id each endpoint ended with (index (p * NC + c) * E + k) */
byte finished;

inline allreduce(c, mine, out)
{
    atomic {
        g = gen[c];
        if
        :: arrived[c] == 0 -> acc[c] = mine
        :: else -> acc[c] = acc[c] & mine
        fi;
        arrived[c]++;
        if
        :: arrived[c] == PARTS(c) -> result[c] = acc[c]; arrived[c] = 0; gen[c] = 1 - gen[c]
        :: else
        fi
    }
    gen[c] != g;
    out = result[c]
}

/* One participant of process p in the agreement for communicator c: the id, plus one. */
inline agree(p, c, id)
{
    id = 0;
    do
    :: id != 0 -> break
    :: else ->
        atomic { /* the local lock */
#ifdef NO_LOCAL_LOCK
            mine = mask[p];
            own = true
#else
            if
            :: in_use[p] || c + 1 > lowest[p] ->
                mine = 0;
                own = false;
                if
                :: c + 1 < lowest[p] -> lowest[p] = c + 1
                :: else
                fi
            :: else ->
                mine = mask[p];
                in_use[p] = true;
                lowest[p] = c + 1;
                own = true
            fi
#endif
        }
        allreduce(c, mine, res);
        atomic {
            if
            :: res != 0 ->
                /* every participant lent its mask: the lowest common free id */
                if
                :: res & 1 -> low = 1; id = 1
                :: (res & 3) == 2 -> low = 2; id = 2
                :: (res & 7) == 4 -> low = 4; id = 3
                :: (res & 15) == 8 -> low = 8; id = 4
                fi;
                mask[p] = mask[p] & (15 - low);
                if
                :: lowest[p] == c + 1 -> lowest[p] = NONE
                :: else
                fi;
                in_use[p] = false
            :: else ->
                if
                :: own -> in_use[p] = false
                :: else
                fi;
#ifdef NO_RETRY
                id = NONE; /* gives up */
#endif
                skip
            fi
        }
    od
}

proctype endpoint(byte p; byte c; byte k)
{
    byte mine, res, low, id;
    bit g;
    bool own, last;
#ifdef EACH_ENDPOINT
    agree(p, c, id);
    got[(p * NC + c) * E + k] = id;
#else
    /* The siblings meet; the last to arrive takes part for the process. */
    atomic {
        met[p * NC + c]++;
        last = met[p * NC + c] == EPS(p, c)
    }
    if
    :: last ->
        agree(p, c, id);
        agreed[p * NC + c] = id;
        published[p * NC + c] = true
    :: else ->
        published[p * NC + c];
        id = agreed[p * NC + c]
    fi;
    got[(p * NC + c) * E + k] = id;
#endif
    finished++
}

ltl all_end { <> (finished == ALL) }

init
{
    byte p, c, k;
    atomic {
        for (p : 0 .. NP - 1) {
            for (c : 0 .. NC - 1) {
                for (k : 0 .. EPS(p, c) - 1) {
                    run endpoint(p, c, k)
                }
            }
        }
    }
    finished == ALL;
    /* every endpoint of a communicator, on every process, has its id; A's and B's differ */
    for (c : 0 .. NC - 1) {
        for (p : 0 .. NP - 1) {
            for (k : 0 .. EPS(p, c) - 1) {
                assert(got[(p * NC + c) * E + k] != 0 && got[(p * NC + c) * E + k] != NONE);
                assert(got[(p * NC + c) * E + k] == got[c * E]);
            }
        }
    }
    assert(got[0] != got[E]);
}
