#!/bin/bash
# Measurement (not a test): how many of memcaslap's gets miss once a DRAM-only server is
# full and each new memcaslap run brings new keys (memcaslap runs of DUR against one
# server, 90/10, 1 KB values, 64 connections): the replacement policy's keep-new-items
# behaviour, which memcached's LRU has. Prints each run's TPS, gets, misses, evictions.
#
#   POLICY=hotspot scripts/memcaslap-misses.sh     # fogcached --policy hotspot --slow-size 0
#   POLICY=dual-lru scripts/memcaslap-misses.sh
#   POLICY=memcached scripts/memcaslap-misses.sh   # Debian's memcached, same -m
#
# Settings: M [128] (-m, MB)  ROUNDS [4]  DUR [15s]  FOGCACHED [target/release/fogcached]
# DRAM-only, small -m: memcaslap rounds (each a new process), get misses per round.
set -u
M=${M:-128}; POLICY=${POLICY:-hotspot}; ROUNDS=${ROUNDS:-4}; DUR=${DUR:-15s}
# The server starts on a loopback port the kernel picks, read from its port file.
. "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
d=$(mktemp -d)
if [ "$POLICY" = memcached ]; then
  launch_server "$d/server" memcached -m $M -t 2 -c 1024 || exit 1
else
  launch_server "$d/server" ${FOGCACHED:-target/release/fogcached} -m $M -t 2 -c 1024 --slow-size 0 --data-dir $d/data --policy $POLICY || exit 1
fi
pid=$launched_pid; port=$launched_port
cfg=$(mktemp); printf 'key\n32 32 1\nvalue\n1024 1024 1\ncmd\n0 0.1\n1 0.9\n' > $cfg
st() { python3 -c "
import socket,sys
s=socket.create_connection(('127.0.0.1',$port)); s.sendall(b'stats\r\n'); b=b''
while not b.endswith(b'END\r\n'): b+=s.recv(65536)
print(dict(l.split()[1:3] for l in b.decode().splitlines() if l.startswith('STAT')).get('$1','0'))"; }
for r in $(seq 1 $ROUNDS); do
  g0=$(st cmd_get); m0=$(st get_misses); e0=$(st evictions)
  memcaslap --servers 127.0.0.1:$port --cfg_cmd $cfg --time $DUR --stat_freq $DUR --threads 2 --concurrency 64 > /tmp/missprobe-caslap.out 2>&1
  g1=$(st cmd_get); m1=$(st get_misses); e1=$(st evictions)
  tps=$(awk '/^Run time:/{for(i=1;i<=NF;i++) if($i=="TPS:") print $(i+1)}' /tmp/missprobe-caslap.out)
  echo "$POLICY round $r: TPS $tps gets $((g1-g0)) misses $((m1-m0)) ($(python3 -c "print(round(100*($m1-$m0)/max(1,$g1-$g0),1))") %) evictions $((e1-e0)) items $(st curr_items)"
done
kill $pid; wait $pid 2>/dev/null
rm -rf "$d" "$cfg"
