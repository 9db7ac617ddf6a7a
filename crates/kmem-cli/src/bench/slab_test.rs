//! Christoph Lameter's slab_test, as the suites `slab` (kmalloc and the peers) and
//! `debug` (kmem_cache in each hardening and slub_debug mode) run it: test 1's
//! measurement (allocate a batch, then free it, each phase timed apart) and the
//! report in slab_test's own format (`10000 times kmalloc(8) -> 41 cycles kfree ->
//! 81 cycles`), as in the cover letter of "slub: Fastpath optimization (especially
//! for RT) V1".

use super::timing::{phase, Ctx, Phase, Timing};
use std::fmt::Write as _;

impl Ctx {
    /// slab_test's test 1 shape: `rounds` times, fill `ptrs` with `alloc()`, then give
    /// them all to `free`; medians per allocation and per free, timed apart.
    pub fn alloc_then_free(
        &self,
        rounds: u64,
        ptrs: &mut [*mut u8],
        mut alloc: impl FnMut() -> *mut u8,
        mut free: impl FnMut(*mut u8),
    ) -> [Timing; 2] {
        self.measure_phases(ptrs.len() as u64 * rounds, |_| {
            then_phases(rounds, ptrs, &mut alloc, &mut free)
        })
    }
}

/// One run of test 1: `rounds` times, fill `ptrs` with `alloc()`, then give them all
/// to `free`; the time of each phase, summed over the rounds. A contestant of
/// [`Ctx::measure_phases_interleaved`] returns this for its turn.
pub fn then_phases(
    rounds: u64,
    ptrs: &mut [*mut u8],
    mut alloc: impl FnMut() -> *mut u8,
    mut free: impl FnMut(*mut u8),
) -> [Phase; 2] {
    let mut acc = [Phase {
        ns: 0.0,
        cycles: Some(0.0),
    }; 2];
    for _ in 0..rounds {
        let pa = phase(|| {
            for p in ptrs.iter_mut() {
                *p = alloc();
            }
        });
        let pf = phase(|| {
            for &p in ptrs.iter() {
                free(std::hint::black_box(p));
            }
        });
        for (a, p) in acc.iter_mut().zip([pa, pf]) {
            a.ns += p.ns;
            a.cycles = a.cycles.zip(p.cycles).map(|(x, y)| x + y);
        }
    }
    acc
}

/// The names slab_test prints for one allocator interface.
pub struct SlabTestNames {
    /// "Kmalloc" / "Kmem_cache".
    pub title: &'static str,
    /// "kmalloc" / "kmem_cache_alloc".
    pub alloc: &'static str,
    /// "kfree" / "kmem_cache_free".
    pub free: &'static str,
}

/// slab_test's report for one allocator: test 1 (`then_free(size)` gives the cycles
/// per allocation and per free) and test 2 (`pair(size)`, per pair).
pub fn slab_test_lines(
    out: &mut String,
    who: &str,
    names: &SlabTestNames,
    sizes: &[u64],
    then_free: impl Fn(u64) -> (f64, f64),
    pair: impl Fn(u64) -> f64,
) {
    let SlabTestNames { title, alloc, free } = names;
    let _ = writeln!(out, "\n{who}: Single thread testing");
    let _ = writeln!(out, "1. {title}: Repeatedly allocate then free test");
    for &size in sizes {
        let (a, f) = then_free(size);
        let _ = writeln!(
            out,
            "10000 times {alloc}({size}) -> {a:.0} cycles {free} -> {f:.0} cycles"
        );
    }
    let _ = writeln!(out, "2. {title}: alloc/free test");
    for &size in sizes {
        let _ = writeln!(
            out,
            "10000 times {alloc}({size})/{free} -> {:.0} cycles",
            pair(size)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_in_slab_tests_format() {
        let mut out = String::new();
        let names = SlabTestNames {
            title: "Kmalloc",
            alloc: "kmalloc",
            free: "kfree",
        };
        slab_test_lines(
            &mut out,
            "kmem",
            &names,
            &[8, 16],
            |s| (s as f64 * 1.5, 7.49),
            |s| s as f64 + 0.5,
        );
        assert_eq!(
            out,
            "\nkmem: Single thread testing\n\
             1. Kmalloc: Repeatedly allocate then free test\n\
             10000 times kmalloc(8) -> 12 cycles kfree -> 7 cycles\n\
             10000 times kmalloc(16) -> 24 cycles kfree -> 7 cycles\n\
             2. Kmalloc: alloc/free test\n\
             10000 times kmalloc(8)/kfree -> 8 cycles\n\
             10000 times kmalloc(16)/kfree -> 16 cycles\n"
        );
    }

    #[test]
    fn alloc_then_free_fills_then_frees_every_slot_each_round() {
        let ctx = Ctx::quiet(true);
        let mut ptrs = [std::ptr::null_mut::<u8>(); 4];
        let mut next = 0usize;
        let mut freed = Vec::new();
        let [a, f] = ctx.alloc_then_free(
            2,
            &mut ptrs,
            || {
                next += 1;
                std::ptr::without_provenance_mut(next)
            },
            |p| freed.push(p as usize),
        );
        // A warm-up run and `reps` runs, each of 2 rounds of 4.
        assert_eq!(next, (1 + ctx.reps) * 2 * 4);
        assert_eq!(freed.len(), next);
        assert_eq!(&freed[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((a.ops, f.ops), (8, 8));
    }
}
