#!/bin/bash
# Device checks of the twelfth session (a folder holding a stripped `kmem` built here).
# Call 1: the goals' suites, thread mode and the per-CPU modes (memcg's first try ran
# out of its 170 s; call 2 ran it alone).
cd "$(dirname "$0")"
nproc; lscpu | grep -E "Model name|Thread|Core|Socket"; T0=$(date +%s)
timeout 200 ./kmem bench percpu --json > $OUT/percpu.json 2>$OUT/percpu.err; echo "percpu rc=$? $(( $(date +%s)-T0 ))s"
timeout 150 ./kmem bench slab cache global --json > $OUT/scg.json 2>$OUT/scg.err; echo "scg rc=$? $(( $(date +%s)-T0 ))s"
# Call 2:
timeout 380 ./kmem bench memcg --json > $OUT/memcg.json 2>$OUT/memcg.err
# Call 3, after the zero-area CPU table (commit 7e2fee2): percpu again (a second run
# did not fit in the device time left).
timeout 120 ./kmem bench percpu --json > $OUT/percpu1.json 2>$OUT/percpu1.err
