//! The process heap's platform: kmem-core's [`Platform`] for the heap. The operating
//! system's primitives come from [`LinuxPlatform`]; what only the heap knows is here:
//! the slab flags the environment asks for (`KMEM_DEBUG`, `KMEM_INIT`, `KMEM_HARDEN`),
//! per-CPU mode's take of a CPU freelist (a restartable sequence on the area's CPU),
//! yielding while a lock spins, and aging the huge mappings after each free page
//! reporting pass.
//!
//! Locking: none; it reads the heap's configuration, which is fixed before the core is
//! initialised.

use super::HEAP;
use crate::config::{DebugFlags, EnvConfig, Harden};
use crate::platform::{os, LinuxPlatform};
use kmem_core::{Platform, SlabFlags};
use std::sync::atomic::AtomicUsize;

/// kmem-core's platform for the process heap (see the module doc).
pub struct HeapPlatform {
    os: LinuxPlatform,
}

impl HeapPlatform {
    /// The heap's platform over a fresh [`LinuxPlatform`].
    pub const fn new() -> Self {
        Self {
            os: LinuxPlatform::new(),
        }
    }

    /// The operating system's primitives (span reservation, NUMA setup).
    pub fn os(&self) -> &LinuxPlatform {
        &self.os
    }
}

impl Default for HeapPlatform {
    fn default() -> Self {
        Self::new()
    }
}

impl Platform for HeapPlatform {
    unsafe fn section_online(&self, addr: *mut u8, len: usize, nid: usize) -> bool {
        // SAFETY: forwarded from kmem-core, which upholds the contract.
        unsafe { self.os.section_online(addr, len, nid) }
    }

    unsafe fn report_free(&self, addr: *mut u8, len: usize) {
        // SAFETY: forwarded from kmem-core, which upholds the contract.
        unsafe { self.os.report_free(addr, len) }
    }

    unsafe fn reserve_tag_table(&self, len: usize) -> *mut u8 {
        // SAFETY: forwarded from kmem-core, which upholds the contract.
        unsafe { self.os.reserve_tag_table(len) }
    }

    unsafe fn tag_table_online(&self, addr: *mut u8, len: usize) -> bool {
        // SAFETY: forwarded from kmem-core, which upholds the contract.
        unsafe { self.os.tag_table_online(addr, len) }
    }

    fn now_ns(&self) -> u64 {
        self.os.now_ns()
    }

    fn area_orphaned(&self, area: &kmem_core::percpu::CpuArea) -> bool {
        super::fork::area_orphaned(area)
    }

    fn log(&self, text: &str) {
        self.os.log(text)
    }

    /// `KMEM_ON_ERROR=abort`: the report is out; stop the program.
    fn after_bug_report(&self) {
        if HEAP
            .abort_on_error
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            abort_after_report();
        }
    }

    /// A slab constructor's nested allocations and frees take the zone path: the
    /// thread's slots say it has no area for the constructor's duration
    /// (`thread::callout_enter`).
    fn callout_enter(&self) -> usize {
        super::thread::callout_enter()
    }

    fn callout_leave(&self, token: usize) {
        super::thread::callout_leave(token)
    }

    /// Huge mappings cached for reuse age with the same decay interval as free pages.
    fn reporting_pass(&self, now_ns: u64) {
        let decay = HEAP.config().decay_ms.saturating_mul(1_000_000);
        HEAP.huge.age(&HEAP, now_ns, decay);
    }

    /// Between reporting passes too: a program that freed its huge blocks and goes on
    /// with small objects only gets the cached mappings' memory back after the decay.
    fn housekeeping(&self) {
        let now = self.now_ns();
        if HEAP.huge.cached_bytes() != 0 {
            self.reporting_pass(now);
        }
        super::live::tick(now);
        crate::kfence::tick(now);
    }

    fn random_u64(&self) -> u64 {
        self.os.random_u64()
    }

    // Inlined: LinuxPlatform's trace skips a fixed number of frames (its own and the
    // slab layer's capture), so this forwarder must not add one.
    #[inline(always)]
    fn stack_trace(&self, frames: &mut [usize]) {
        self.os.stack_trace(frames)
    }

    fn symbolize(&self, addr: usize, w: &mut dyn std::fmt::Write) -> std::fmt::Result {
        self.os.symbolize(addr, w)
    }

    fn thread_and_pid(&self) -> (u32, u32) {
        self.os.thread_and_pid()
    }

    fn numa_node_id(&self) -> usize {
        self.os.numa_node_id()
    }

    fn relax() {
        os::yield_cpu();
    }

    fn slab_flags(&self, cache: &str) -> SlabFlags {
        slab_flags(HEAP.config(), cache)
    }

    fn take_cpu_freelist(&self, area_id: usize, freelist: &AtomicUsize) -> usize {
        super::rseq_take::rseq_take(area_id, freelist)
    }
}

/// The slab flags every new cache called `name` gets from the environment: slub_debug
/// (`KMEM_DEBUG`, by cache name), `KMEM_INIT` and `KMEM_HARDEN` (every cache).
fn slab_flags(env: &EnvConfig, name: &str) -> SlabFlags {
    let d = env.debug.flags_for(name);
    let mut f = match env.harden {
        Harden::On => SlabFlags::empty(),
        Harden::Random => SlabFlags::RANDOM_FREELIST,
        Harden::Off => SlabFlags::NO_HARDEN,
    };
    if env.init_on_alloc {
        f |= SlabFlags::INIT_ON_ALLOC;
    }
    if env.init_on_free {
        f |= SlabFlags::INIT_ON_FREE;
    }
    if env.stats != crate::config::StatsTarget::None {
        // The exit report shows the fast-path counts too.
        f |= SlabFlags::STATS;
    }
    for (bit, flag) in [
        (DebugFlags::F, SlabFlags::CONSISTENCY_CHECKS),
        (DebugFlags::Z, SlabFlags::RED_ZONE),
        (DebugFlags::P, SlabFlags::POISON),
        (DebugFlags::U, SlabFlags::STORE_USER),
        (DebugFlags::T, SlabFlags::TRACE),
    ] {
        if d.has(bit) {
            f |= flag;
        }
    }
    f
}

/// Ends the program after a report (`KMEM_ON_ERROR=abort`): one line, then SIGABRT.
#[cold]
#[inline(never)]
fn abort_after_report() -> ! {
    crate::platform::linux::write_stderr(
        b"kmem: aborting after the report above (KMEM_ON_ERROR=abort)\n",
    );
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}
