# setup_lock.sh: what contrib/twonode/twonode.sh and contrib/slurm/slurm.sh share, sourced
# by both: their `run` (set up, run a command, tear down), the lock that serializes their
# set-ups and the end of `run`. The sourcing script defines die, say, probe, up, down,
# export_env and $lockfile.
child= # the command `run` started, while it runs

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

# run_set_up WAIT WHAT CMD...: probe the machine, hold the lock (hold_lock WAIT WHAT), set
# up (up, then export_env for the command), run CMD and exit with its status; end_run
# tears down on every way out.
run_set_up() {
    local wait=$1 what=$2 rc=0
    shift 2
    probe || exit $?
    hold_lock "$wait" "$what"
    trap end_run EXIT
    trap 'say "interrupted"; exit 130' INT TERM HUP
    up
    export_env
    # fd 9 (the lock) must not outlive this process in a daemon the command leaves behind.
    "$@" 9>&- &
    child=$!
    wait "$child" || rc=$?
    child=
    exit $rc
}
