//! Per-CPU rseq mode's take of a CPU's word (`Platform::take_cpu_freelist`): a CPU
//! freelist or a sheaf's top, which the restartable sequences of `platform::rseq` pop
//! and push on that CPU with one plain store each. The slab layer's lock holder takes
//! one before working on it: on its own CPU with a sequence ([`rseq::take_on`]), from
//! another with a fence ([`rseq::fence`], `membarrier`'s rseq restart there), and
//! where the kernel refuses the fence, pinned to that CPU for the moment.
//!
//! Owns no state (the fence's registration and count are `platform::rseq`'s).
//! Locking: the caller holds the area's local lock (one lock holder takes at a time);
//! the take itself takes none.
//!
//! [`rseq::take_on`]: crate::platform::rseq::take_on
//! [`rseq::fence`]: crate::platform::rseq::fence

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use super::HEAP;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `cpu-rseq`: the slab layer's take of a CPU freelist or a sheaf's top, `word`
/// (`Platform::take_cpu_freelist`), atomic against the sections of the area's CPU.
/// Every section refuses a 0 word and none commits 0 (a freelist's last pop leaves
/// the slab's end token; a top is its sheaf's address plus 8 an object), and only the
/// lock holder, the caller, makes a 0 word anything else: a 0 word is taken as it is.
///
/// On that CPU, a restartable sequence stores 0 and returns the old value. From
/// another CPU, a *fence* (`membarrier`, [`can_fence`](crate::platform::rseq::can_fence)
/// registered when the mode was chosen):
/// 1. exchange the word for 0, so that a section starting from now on commits nothing;
/// 2. restart whatever section that CPU is running ([`fence`](crate::platform::rseq::fence)):
///    one that read the word before step 1 has committed by now, or starts over and
///    refuses;
/// 3. exchange the word for 0 again: 0 means no commit since step 1, and step 1's
///    value is the take; another value is what such a section committed, a full step
///    from the value step 1 took (a pop's object is its own, a push's is on the list
///    or sheaf), and the take so far — but a section that began after that commit may
///    have read it, so steps 2 and 3 run again until step 3 finds 0.
///
/// No section commits after the last step 3 (its CPU has restarted everything that
/// read anything but 0), so nothing is lost or taken twice: the loom model
/// `loom_rseq_fence.rs` checks both kinds of word (and fails a plain exchange and a
/// take with one restart), the test `another_cpu_s_sheaves_are_taken_with_a_fence`
/// the real thing. Where the fence is refused, the take runs as a sequence on that
/// CPU, the thread pinned there for the moment (even where its own affinity leaves
/// that CPU out: a program that pins its threads, one to a CPU, still has sections
/// running there; so a thread bound to some CPUs may run a moment on another the
/// process may use); a CPU the process may not use (offline, outside its cpuset) runs
/// no section of ours, and a plain exchange is the take; so too if the CPU goes
/// offline while the thread is pinned to it (the kernel moves the thread away). A CPU
/// the thread could not be pinned to (a policy refuses `sched_setaffinity`) gets no
/// plain exchange, which could race a section there: the thread yields until the
/// scheduler runs it on that CPU, and takes there, or until its affinity leaves that
/// CPU out (then a plain exchange, right only if every thread's does).
pub(super) fn rseq_take(area_id: usize, word: &AtomicUsize) -> usize {
    // 0: nothing a section can change, and no write to the other CPU's line.
    if word.load(Ordering::Acquire) == 0 {
        return 0;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use crate::platform::rseq;
        let cpu = HEAP.area_cpu[area_id].load(Ordering::Acquire);
        if let (Some(r), true) = (rseq::area(), cpu != 0) {
            let cpu = cpu as usize - 1;
            let fl = word as *const AtomicUsize as *mut usize;
            // SAFETY: `r` is this thread's registered rseq area; `fl` is a freelist or
            // top word of a `kmem_cache_cpu` in CPU `cpu`'s area.
            let take = || unsafe { rseq::take_on(r, cpu, fl) };
            if let Some(v) = take() {
                return v;
            }
            if rseq::can_fence() {
                return fenced_take(cpu, take, word);
            }
            return pinned_take(cpu, take, word);
        }
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    let _ = area_id;
    // No CPU of ours runs this area's sections: a plain exchange.
    word.swap(0, Ordering::AcqRel)
}

/// [`rseq_take`] from another CPU with the fence (steps 1 to 3); where the kernel
/// refuses the fence meanwhile, [`pinned_take`] reads the word as it stands (with no
/// section half way through, as its sequence runs on that CPU) and settles it the
/// same way.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[cold]
fn fenced_take(cpu: usize, take: impl Fn() -> Option<usize>, word: &AtomicUsize) -> usize {
    use crate::platform::rseq;
    let mut taken = word.swap(0, Ordering::AcqRel);
    if taken == 0 {
        return 0;
    }
    loop {
        if !rseq::fence(cpu) {
            return match pinned_take(cpu, take, word) {
                0 => taken,
                v => v,
            };
        }
        match word.swap(0, Ordering::AcqRel) {
            0 => return taken,
            v => taken = v,
        }
    }
}

/// [`rseq_take`] without the fence: `take` (the sequence) run on CPU `cpu`, the thread
/// pinned there, or waiting to be; a plain exchange where no thread of ours may run
/// there.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[cold]
fn pinned_take(cpu: usize, take: impl Fn() -> Option<usize>, word: &AtomicUsize) -> usize {
    use crate::platform::rseq::{self, OnCpu};
    // Pinned: the take runs there, unless the CPU left the thread's affinity
    // meanwhile (gone offline): checked every so often.
    let pinned = rseq::on_cpu(cpu, || {
        let mut tries = 0u32;
        loop {
            if let Some(v) = take() {
                return Some(v);
            }
            tries = tries.wrapping_add(1);
            if tries & 1023 == 0 && !rseq::allowed(cpu) {
                return None;
            }
        }
    });
    match pinned {
        OnCpu::Ran(Some(v)) => return v,
        OnCpu::Ran(None) | OnCpu::NotAllowed => {}
        OnCpu::Failed => loop {
            if let Some(v) = take() {
                return v;
            }
            if !rseq::allowed(cpu) {
                break;
            }
            crate::platform::os::yield_cpu();
        },
    }
    word.swap(0, Ordering::AcqRel)
}
