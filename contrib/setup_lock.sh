# setup_lock.sh: what contrib/twonode/twonode.sh and contrib/slurm/slurm.sh share, sourced
# by both: the lock that serializes their set-ups and the end of their `run`. The sourcing
# script defines die, say, down, $lockfile and $child.

# hold_lock WAIT WHAT: holds $lockfile on fd 9 for the life of this process, waiting at
# most WAIT seconds (else dies naming WHAT). The file is removed at the end (end_run); a
# waiter that then gets the lock of the removed file sees that the path names another
# file now, and tries again.
hold_lock() {
    local wait=$1 what=$2 start=$SECONDS
    while :; do
        exec 9>>"$lockfile"
        if ! flock -w $((wait - (SECONDS - start) > 0 ? wait - (SECONDS - start) : 0)) 9; then
            die "$what held $lockfile for $wait s"
        fi
        if [ "$(stat -c %d:%i "$lockfile" 2>/dev/null)" = "$(stat -L -c %d:%i /proc/$$/fd/9)" ]; then
            return 0
        fi
        exec 9>&-
    done
}

# end_run: the end of `run`, on every way out. On INT/TERM the command ($child) is ended
# first, so that nothing it started is left running (down removes what remains).
end_run() {
    trap - EXIT INT TERM HUP
    if [ -n "$child" ]; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
    down
    rm -f "$lockfile"
    say "down"
}
