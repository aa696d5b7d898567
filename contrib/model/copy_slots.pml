/*
 * Promela model of a rendezvous in two copies (endpoints/engine_copy.cpp: stream_out,
 * handle_frag): the sender copies a message's pieces into the copy slots it keeps for
 * the receiver and pushes a FRAG (slot, offset) for each; the receiver copies each
 * piece out and clears the slot's busy word. Can a piece be overwritten while the
 * receiver copies it, or arrive out of order?
 *
 * Processes:
 *   S: the sender's drains of its outbound list (one at a time: the list's lock). For
 *      piece i: slot i % SLOTS; wait until the slot's busy word is clear (acquire), write
 *      the piece, set busy, push the FRAG into the receiver's queue (the queue's release).
 *   R: the receiver's drains. For each FRAG: check it continues the transfer (its offset
 *      is the number of pieces received), copy the piece out in two steps (a memcpy is not
 *      atomic: the piece must be the same at its start and end), clear busy (release).
 * The sender's memory is sequentially consistent here; the acquire/release pairs named
 * above give the same orders on TSO and weaker machines.
 *
 * Broken variants, which must fail:
 *   -DNO_BUSY    the sender reuses a slot without waiting for its busy word: a piece is
 *                overwritten during the receiver's copy;
 *   -DANY_QUEUE  the sender pushes each FRAG into whichever of two queues of the receiver
 *                (as push() does for other messages): FRAGs overtake each other.
 *
 * Checked by check_model.sh (safety run): the assertions and no invalid end state.
 */
#ifndef SLOTS
#define SLOTS 2
#endif
#ifndef PIECES
#define PIECES 5
#endif
#define QUEUE 3 /* FRAGs a queue holds */

byte data[SLOTS]; /* the piece a slot holds (its offset) */
bool busy[SLOTS];
chan q0 = [QUEUE] of { byte, byte }; /* slot, offset */
#ifdef ANY_QUEUE
chan q1 = [QUEUE] of { byte, byte };
#endif
byte received;

active proctype sender()
{
    byte i = 0;
    byte slot;
    do
    :: i == PIECES -> break
    :: else ->
        slot = i % SLOTS;
#ifndef NO_BUSY
        busy[slot] == false; /* stream_out: a busy slot ends this drain; a later one retries */
#endif
        data[slot] = i;
        busy[slot] = true;
#ifdef ANY_QUEUE
        if
        :: q0 ! slot, i
        :: q1 ! slot, i
        fi;
#else
        q0 ! slot, i; /* a full queue: the drain stops, a later one pushes it */
#endif
        i++
    od
}

active proctype receiver()
{
    byte slot, offset, first, last;
    do
    :: received == PIECES -> break
    :: else ->
        if
        :: q0 ? slot, offset
#ifdef ANY_QUEUE
        :: q1 ? slot, offset
#endif
        fi;
        assert(offset == received); /* handle_frag refuses anything else as a fault */
        first = data[slot];         /* the copy's first byte ... */
        last = data[slot];          /* ... and its last */
        assert(first == offset && last == offset);
        busy[slot] = false;
        received++
    od
}
