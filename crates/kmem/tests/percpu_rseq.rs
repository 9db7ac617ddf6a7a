//! Per-CPU mode with restartable sequences (`KMEM_PERCPU=cpu-rseq`): one CPU area per
//! CPU; allocations and frees on the CPU slab pop and push in an rseq critical
//! section that commits with a plain store, everything else under the area's local
//! lock, which takes a CPU freelist with an rseq section on that CPU. Where glibc
//! registers no rseq area the heap falls back (and the tests check that).

const MODE: kmem::config::PerCpuMode = kmem::config::PerCpuMode::CpuRseq;

mod common;

include!("percpu/tests.rs");
