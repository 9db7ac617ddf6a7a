//! Per-CPU mode with every operation under the CPU area's local lock
//! (`KMEM_PERCPU=cpu-lock`, the portable fallback): one CPU area per CPU, shared by
//! the threads running on it.

const MODE: kmem::config::PerCpuMode = kmem::config::PerCpuMode::CpuLock;

mod common;

include!("percpu/tests.rs");
