//! Platform implementations: the only modules that name an operating system or call
//! the C library. They sit at the bottom of the crate: they may use `kmem_core`, and
//! nothing of the heap, huge mappings, configuration or the allocator front ends.
//!
//! - [`linux`]: [`LinuxPlatform`] (kmem-core's `Platform`: sections, reporting, time,
//!   randomness, stack traces), `getcpu`, sysfs nodes, glibc's rseq registration,
//!   stderr writers;
//! - [`rseq`]: the restartable sequences of per-CPU mode (x86_64);
//! - `fast_tls`: the fast paths' one thread-local word (initial-exec TLS on x86_64);
//! - `own_code`: where kmem's own functions lie in a program that links it (for
//!   slub_debug's tracks);
//! - `os`: thin wrappers over the other C library calls the crate needs (environment,
//!   mappings, the thread-exit key, `atexit`/`pthread_atfork`, files, the CPU count).
//!
//! No locks; nothing here allocates through the heap (kmem may be the process's
//! malloc).

pub(crate) mod fast_tls;
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::LinuxPlatform;
#[cfg(target_os = "linux")]
pub(crate) mod os;
#[cfg(target_os = "linux")]
pub(crate) mod own_code;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod rseq;

/// What a restartable push (`rseq::push`, `rseq::sheaf_push_at`) did; defined on
/// every target, where the heap's rseq free paths answer [`Pushed::No`] without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// On the CPU freelist.
    Done,
    /// Not done: the object's slab is not the CPU slab (or no area yet).
    No,
    /// The object is already at the freelist's head: a double free (not done).
    AtHead,
}

/// Largest CPU id (plus one) that gets a CPU area in per-CPU mode: the length of the
/// heap's CPU table, which the restartable sequences of [`rseq`] index directly. A CPU
/// past it allocates through the zones (correct, without per-CPU lists).
pub const MAX_CPU_IDS: usize = 1024;
