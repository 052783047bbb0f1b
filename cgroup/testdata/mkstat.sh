#!/bin/bash
# Writes the cgroup v2 files of one cgroup in the formats of Linux 6.1
# (mm/memcontrol.c memory_stat_format, kernel/sched/psi.c psi_show,
# block/blk-cgroup.c blkcg_print_stat, kernel/cgroup/cgroup.c cpu_stat_show).
# Usage: mkstat.sh DIR CURRENT MAX ANON FILE ACTIVE_FILE INACTIVE_FILE PIDS PIDSMAX PSI_SOME10 PSI_SOME60 TOTAL
set -eu
d=$1 cur=$2 max=$3 anon=$4 file=$5 af=$6 if=$7 pids=$8 pmax=$9 s10=${10} s60=${11} tot=${12}
mkdir -p "$d"
echo "$cur" > "$d/memory.current"
echo "$max" > "$d/memory.max"
echo "max" > "$d/memory.high"
echo "0" > "$d/memory.min"
cat > "$d/memory.stat" <<S
anon $anon
file $file
kernel 1769472
kernel_stack 98304
pagetables 311296
sec_pagetables 0
percpu 40320
sock 0
vmalloc 8192
shmem 0
zswap 0
zswapped 0
file_mapped 2027520
file_dirty 4096
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon $((anon/2))
active_anon $((anon - anon/2))
inactive_file $if
active_file $af
unevictable 0
slab_reclaimable 912384
slab_unreclaimable 390968
slab 1303352
workingset_refault_anon 0
workingset_refault_file 118
workingset_activate_anon 0
workingset_activate_file 12
workingset_restore_anon 0
workingset_restore_file 0
workingset_nodereclaim 0
pgscan 4051
pgsteal 3974
pgscan_kswapd 0
pgscan_direct 4051
pgsteal_kswapd 0
pgsteal_direct 3974
pgfault 2112731
pgmajfault 37
pgrefill 1086
pgactivate 20513
pgdeactivate 1086
pglazyfree 0
pglazyfreed 0
zswpin 0
zswpout 0
thp_fault_alloc 0
thp_collapse_alloc 0
S
printf 'low 0\nhigh 0\nmax 14\noom 1\noom_kill 1\noom_group_kill 0\n' > "$d/memory.events"
echo "$pids" > "$d/pids.current"
echo "$pmax" > "$d/pids.max"
cat > "$d/cpu.stat" <<S
usage_usec 41532117
user_usec 30125510
system_usec 11406607
nr_periods 3321
nr_throttled 402
throttled_usec 9871234
S
printf '8:0 rbytes=1548288 wbytes=40960 rios=98 wios=9 dbytes=0 dios=0\n253:0 rbytes=2048 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n' > "$d/io.stat"
printf 'some avg10=0.00 avg60=0.00 avg300=0.00 total=981763\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=411207\n' > "$d/cpu.pressure"
printf 'some avg10=%s avg60=%s avg300=0.41 total=%s\nfull avg10=0.00 avg60=0.00 avg300=0.07 total=%s\n' "$s10" "$s60" "$tot" "$((tot/3))" > "$d/memory.pressure"
printf 'some avg10=0.12 avg60=0.03 avg300=0.00 total=104912\nfull avg10=0.10 avg60=0.02 avg300=0.00 total=97720\n' > "$d/io.pressure"
echo 1 > "$d/cgroup.pressure"
echo "cpuset cpu io memory hugetlb pids rdma misc" > "$d/cgroup.controllers"
: > "$d/cgroup.procs"
