//! Per-CPU mode with SLUB's lockless fast paths (`KMEM_PERCPU=cpu-cas`): one CPU
//! area per CPU; allocations and frees on the CPU slab pop and push with a double-word
//! CAS of `(freelist, tid)`, everything else under the area's local lock. Where there
//! is no double-word CAS the heap falls back to `cpu-lock` (and the tests check that).

const MODE: kmem::config::PerCpuMode = kmem::config::PerCpuMode::CpuCas;

mod common;

include!("percpu/tests.rs");
