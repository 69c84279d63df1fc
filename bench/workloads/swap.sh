# swap (issues 6 and 8): bench/swap.sh once per repetition, its four runs
# in an order rotated between repetitions:
#
#   floor     sp_tester --no-push: the first buffer is never swapped out
#             (and the reread follows at once: there is nothing to wait for)
#   without   pushed out to swap, reread with no daemon
#   with      pushed out to swap, tiercache swap-prefetch running (level 3):
#             pages come back into the swap cache, the reread maps each
#             with a minor fault
#   mapped    the same with swap-prefetch --map: pages are also mapped into
#             sp_tester's page tables before the reread
#
# in a memory cgroup (1 GiB; 512 MiB at SCALE=small) with a swap file on
# local disk; the sleep between the push and the reread is 20 s (10 s at
# SCALE=small: half the data, half the time; at 5 s the daemon, at its
# default pace of 64 MiB/s after two calm intervals, had not finished and
# the figure measured its pace, not the reread; bench/swap.sh prints when
# it finished).  The figure is the reread time of the first buffer.

wl_swap() {
  local limit sleep_s rep r mode run secs majflt
  if [ "$SCALE" = small ]; then limit=512M sleep_s=10; else limit=1G sleep_s=20; fi
  wl_begin swap
  for rep in $(seq 1 "$REPS"); do
    : >"$WORK/record"
    "$ROOT/bench/swap.sh" --build "$ROOT/$BUILD" --limit "$limit" --sleep "$sleep_s" \
      --dir "$WORK" --order "$(order "$rep" floor without with mapped | paste -sd' ')" \
      --record "$WORK/record" >"$WORK/swap-$rep.log" 2>&1 ||
      { cat "$WORK/swap-$rep.log" >&2; die "bench/swap.sh failed"; }
    sed 's/^/  /' "$WORK/swap-$rep.log" >&2
    while read -r mode run secs majflt; do
      record swap reread "$run" seconds s "$rep" "$secs"
      record swap reread "$run" major_faults count "$rep" "$majflt"
    done <"$WORK/record"
  done
  ratio swap "reread: with the daemon ÷ floor" reread/with/seconds reread/floor/seconds "<=1.5"
  ratio swap "reread: without ÷ with the daemon" reread/without/seconds reread/with/seconds ">=4"
  ratio swap "reread: with --map ÷ floor" reread/mapped/seconds reread/floor/seconds "<=1.5"
  ratio swap "reread: without ÷ with --map" reread/without/seconds reread/mapped/seconds ">=4"
  ratio swap "reread: without ÷ floor" reread/without/seconds reread/floor/seconds "-"
  plot swap reread seconds "reread of the first buffer (s, lower is better)"
  plot swap reread major_faults "major faults during the reread"
  note swap "sp_tester in a memory cgroup of $limit, swap file on local disk, ${sleep_s} s between the push and the reread, reread mode 'bytes'; the daemon at level 3 (prefetch whether or not the machine is idle: the machine is shared); 'mapped' adds --map."
  wl_end
}
