#!/bin/bash
# device check 2: preloaded larson-style server pattern (C) at 1..32 threads on 16 cores,
# kmem (thread, cpu-rseq) vs mimalloc, jemalloc, tcmalloc, glibc; percpu_memory; workloads again.
cd "$(dirname "$0")"  # a folder holding kmem, libkmem.so, the peer libraries and larson (gcc -O2 -pthread larson.c)
nproc; T0=$(date +%s)
for rep in 1 2; do for n in 1 2 4 8 16 32; do
  for a in kmem kmem-rseq mimalloc jemalloc tcmalloc system; do
    case $a in
      kmem) L=$PWD/libkmem.so; E="";; kmem-rseq) L=$PWD/libkmem.so; E="KMEM_PERCPU=cpu-rseq";;
      mimalloc) L=$PWD/libmimalloc.so.2; E="";; jemalloc) L=$PWD/libjemalloc.so.2; E="";;
      tcmalloc) L=$PWD/libtcmalloc_minimal.so.4; E="";; system) L=""; E="";;
    esac
    r=$(env $E LD_PRELOAD=$L timeout 20 ./larson $n 2 2>&1 | tail -1)
    echo "larson $rep $a $n $r" | tee -a $OUT/larson_c.txt
  done
done; done
echo "larson done $(( $(date +%s)-T0 ))s"
timeout 60 ./kmem bench percpu_memory --json > $OUT/pm.json 2>$OUT/pm.err; echo "pm rc=$? $(( $(date +%s)-T0 ))s"
timeout 200 ./kmem bench workloads --json > $OUT/wl_thread2.json 2>$OUT/wl_thread2.err; echo "wl rc=$? $(( $(date +%s)-T0 ))s"
