//! Per-CPU mode with restartable sequences (`KMEM_PERCPU=cpu-rseq`): one CPU area per
//! CPU; allocations and frees on the CPU slab pop and push in an rseq critical
//! section that commits with a plain store, everything else under the area's local
//! lock, which takes a CPU freelist with an rseq section on that CPU. Where glibc
//! registers no rseq area the heap falls back (and the tests check that).

const MODE: kmem::config::PerCpuMode = kmem::config::PerCpuMode::CpuRseq;

mod common;

include!("percpu/tests.rs");

/// The restartable sequences' pop takes the spare once the main sheaf is empty, so a
/// free that finds the spare full trades it at the barn instead of swapping the two
/// under the lock. A thread allocating and freeing one 16 KiB block at a time (sheaves
/// of two objects) then runs without the slow path; with the swap, once both sheaves
/// were full every free swapped (`workloads` medium: 125,000 swaps in 125,000 pairs).
#[test]
fn a_medium_pair_loop_swaps_no_sheaves_under_the_lock() {
    use kmem_core::slab::SlubStat;
    let _s = setup();
    let h = heap();
    if h.percpu_mode() != PerCpuMode::CpuRseq {
        // No restartable sequences on this machine: the other modes' binaries test
        // what runs instead.
        println!("rseq unavailable");
        return;
    }
    let size = 16 << 10;
    let s = h.kmem().kmalloc_cache(size, Gfp::KERNEL).unwrap();
    assert!(s.config().sheaf_capacity <= 4);
    let swaps = || s.stat_sum(h.kmem().pages.cpu_areas().iter(), SlubStat::SheafSwap);
    // Both sheaves of this CPU full, and more.
    let held: Vec<*mut u8> = (0..16)
        .map(|_| h.kmalloc(size, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    for p in held {
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(p) });
    }
    let before = swaps();
    let n = 20_000u64;
    for i in 0..n {
        let p = h.kmalloc(size, Gfp::KERNEL).unwrap().as_ptr();
        // SAFETY: a fresh block of `size` bytes.
        unsafe { p.cast::<u64>().write(i) };
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(p) });
    }
    // A thread that moves to another CPU meets that CPU's sheaves as they are: a few
    // swaps may come with each move, never one a pair.
    let swapped = swaps() - before;
    assert!(swapped < n / 100, "{swapped} swaps in {n} pairs");
}
