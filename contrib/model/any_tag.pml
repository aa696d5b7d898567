/*
 * Promela model of any-tag receives (matching/comm_inl.hpp: basic_comm::post_any_tag,
 * arrive, match_arrival, match_arrival_slow, set_assertions): can an any-tag receive from
 * a sender wait in the sender's peer list while a message of that sender it accepts waits
 * unexpected, so that neither ever meets the other?
 *
 * The sender's messages arrive unordered (the case that needs care: ordered arrivals hold
 * the peer lock anyway). An unordered arrival takes the peer lock only when it sees
 * wildcards allowed at its start; the bucket-lock step and the TLP-lock step look at the
 * mode again and, finding wildcards allowed without the peer lock, start over with it.
 * An any-tag post takes the peer lock and queues in the peer list when wildcards are
 * allowed and the peer's count of unexpected messages is zero; otherwise it takes the TLP
 * lock, takes the earliest unexpected message or queues in the list of all wildcards.
 * Allowing wildcards again (set_assertions) holds the TLP lock and the bucket lock,
 * rebuilds the unexpected list from the FIFO and recounts the peer's messages.
 * Locks make the model's interleavings exact (the code's relaxed counts are read and
 * written under the locks named in comm.hpp); all messages and receives share one key.
 *
 * Configurations: the mode starts with wildcards allowed, or not allowed and a thread
 * allows them while messages arrive (posts start once they are allowed, as in a legal
 * program). Checked by check_model.sh (safety run): at the end every message has met a
 * receive (as many receives as messages), none waits unexpected, none is left posted.
 * Deliberately broken variants must fail:
 *   -DNO_PEER_LOCK: unordered arrivals never take the peer lock (as before any-tag
 *   receives had a peer list);
 *   -DNO_RECOUNT: allowing wildcards again does not recount the peer's messages.
 */
#ifndef N
#define N 2
#endif

bool wild = true;       /* wild_allowed_ */
bit plock = 0;          /* the peer spinlock */
bit tlp = 0;            /* the TLP lock (one class suffices here) */
bit bucket = 0;         /* the key's bucket lock */
byte fifo = 0;          /* unexpected messages in the key's FIFO (and list, in wild mode) */
byte any_unexp = 0;     /* peer's any_tag_unexpected */
byte plist = 0;         /* any-tag receives in the peer list */
byte glist = 0;         /* receives in the list of all wildcards (wild_posted_) */
byte matched = 0;

inline lock(l) { atomic { l == 0 -> l = 1 } }
inline unlock(l) { l = 0 }

proctype arrival() {
    bool have_peer = false;
    bool wm;
#ifndef NO_PEER_LOCK
    if
    :: wild -> lock(plock); have_peer = true
    :: else -> skip
    fi;
#endif
again:
    if
    :: glist != 0 -> goto slow
    :: else -> skip
    fi;
    lock(bucket);
    wm = wild;
#ifndef NO_PEER_LOCK
    if
    :: wm && !have_peer -> unlock(bucket); lock(plock); have_peer = true; goto again
    :: else -> skip
    fi;
#endif
    if
    :: !wm || glist == 0 ->
        if
        :: have_peer && plist > 0 -> plist--; matched++; unlock(bucket); goto done
        :: else -> skip
        fi;
        if
        :: !wm -> fifo++; unlock(bucket); goto done
        :: else -> skip
        fi
    :: else -> skip
    fi;
    unlock(bucket);
slow:
    lock(tlp);
    lock(bucket);
    wm = wild;
#ifndef NO_PEER_LOCK
    if
    :: wm && !have_peer ->
        unlock(bucket); unlock(tlp); lock(plock); have_peer = true; goto again
    :: else -> skip
    fi;
#endif
    if
    :: have_peer && plist > 0 -> plist--; matched++
    :: glist > 0 -> glist--; matched++
    :: else ->
        fifo++;
        if
        :: wm -> any_unexp++
        :: else -> skip
        fi
    fi;
    unlock(bucket);
    unlock(tlp);
done:
    if
    :: have_peer -> unlock(plock)
    :: else -> skip
    fi
}

proctype poster() {
    wild; /* a legal program posts any-tag receives once wildcards are allowed */
    lock(plock);
    if
    :: wild && any_unexp == 0 -> plist++; unlock(plock)
    :: else ->
        unlock(plock);
        lock(tlp);
        if
        :: fifo > 0 ->
            lock(bucket); fifo--; unlock(bucket);
            if
            :: any_unexp > 0 -> any_unexp--
            :: else -> skip
            fi;
            matched++
        :: else -> glist++
        fi;
        unlock(tlp)
    fi
}

proctype allow_wildcards() {
    lock(tlp);
    lock(bucket);
#ifndef NO_RECOUNT
    any_unexp = fifo;
#endif
    wild = true;
    unlock(bucket);
    unlock(tlp)
}

init {
    byte i;
    atomic {
#ifdef START_NO_WILD
        wild = false;
        run allow_wildcards();
#endif
        i = 0;
        do
        :: i < N -> run arrival(); run poster(); i++
        :: else -> break
        od
    };
    _nr_pr == 1;
    assert(matched == N && fifo == 0 && plist == 0 && glist == 0)
}
