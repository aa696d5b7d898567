/*
 * Promela model of a pthread's reused waiter in the PML's waits (ompi-component/pml_mpiv.c:
 * wait_mpiv_any, wait_mpiv_all, req_done; endpoints/engine.cpp: wait_begin, wake,
 * wait_settle): can a completion of an earlier wait for any of several requests end a
 * later wait of the same thread early?
 *
 * A pthread has one waiter W for all its waits. A request's waiter word is NULL, W (a wait
 * registered on it) or DONE; a completion marks the request complete, exchanges the word
 * for DONE and, if it got W, wakes W (decrements its count of missing completions).
 *
 * Processes:
 *   T: the waiting thread. Wait 1 is MPI_Waitany over requests 1 and 2: begin(1),
 *      register W on each (a failed CAS means complete already: wake itself and stop
 *      registering), wait for the count, take the registrations back (a failed CAS means
 *      that completion took W and owes a wake), and (unless -DNO_SETTLE) settle: wait
 *      until every wake owed has landed. Wait 2 is a blocking send's wait on request 3:
 *      begin(1), register, wait. It asserts that request 3 is complete when wait 2 ends
 *      (the send's buffer may be reused).
 *   C[i]: the completion of request i (1, 2, 3), at any moment.
 * -DNO_SETTLE (the protocol before the fix) must fail the assertion: the completion of
 * request 2 takes W during wait 1 and wakes it during wait 2.
 *
 * Checked by check_model.sh (safety run): the assertion and no invalid end state.
 */
#define NUL  0
#define W    1
#define DONE 2

byte word[4];       /* waiter word of requests 1..3 */
bool complete[4];   /* the request is complete (ompi_request_complete) */
int remaining;      /* W's completions still missing */
int begun;          /* the count W's current wait began with */
byte finished;      /* completions that ran to the end */

proctype completion(byte i)
{
    byte old;
    complete[i] = true;
    atomic { old = word[i]; word[i] = DONE }
    if
    :: old == W -> remaining = remaining - 1   /* wake(W): one atomic decrement */
    :: else -> skip
    fi;
    finished++
}

active proctype T()
{
    byte i;
    byte j;
    byte old;
    int owed = 0;
    /* wait 1: MPI_Waitany over requests 1 and 2 */
    atomic { begun = 1; remaining = 1 }
    i = 1;
    do
    :: i > 2 -> break
    :: i <= 2 ->
        atomic { old = word[i]; if :: old == NUL -> word[i] = W :: else -> skip fi }
        if
        :: old != NUL -> remaining = remaining - 1; owed = 1; break   /* self wake */
        :: else -> i++
        fi
    od;
    remaining <= 0;
    /* take the registrations back (only those made: requests 1 .. i - 1) */
    j = 1;
    do
    :: j >= i || j > 2 -> break
    :: else ->
        atomic { old = word[j]; if :: old == W -> word[j] = NUL :: else -> skip fi }
        if
        :: old != W -> owed++   /* that completion took W: its wake is due */
        :: else -> skip
        fi;
        j++
    od;
#ifndef NO_SETTLE
    begun - remaining >= owed;   /* wait_settle */
#endif
    /* wait 2: a blocking send's wait on request 3 */
    atomic { begun = 1; remaining = 1 }
    atomic { old = word[3]; if :: old == NUL -> word[3] = W :: else -> skip fi }
    if
    :: old != NUL -> remaining = remaining - 1
    :: else -> skip
    fi;
    remaining <= 0;
    assert(complete[3])
}

init
{
    atomic {
        run completion(1);
        run completion(2);
        run completion(3)
    }
}
