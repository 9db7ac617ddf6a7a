//! Unit tests of the huge-mapping list (`huge.rs`).

use super::*;
use std::alloc::{alloc, dealloc, Layout};
use std::cell::Cell;

/// Descriptors from the system allocator, counted; the bytes reserved, counted
/// against `bound` (0: none).
#[derive(Default)]
struct Owner {
    live: Cell<isize>,
    reserved: Cell<usize>,
    bound: usize,
}

const DESC: Layout = Layout::new::<HugeDesc>();

impl HugeOwner for Owner {
    fn desc_alloc(&self) -> Option<NonNull<u8>> {
        self.live.set(self.live.get() + 1);
        // SAFETY: a non-zero-sized layout.
        NonNull::new(unsafe { alloc(DESC) })
    }

    unsafe fn desc_free(&self, d: NonNull<u8>) {
        self.live.set(self.live.get() - 1);
        // SAFETY: from `desc_alloc`, with this layout.
        unsafe { dealloc(d.as_ptr(), DESC) };
    }

    fn reserve(&self, bytes: usize) -> bool {
        let r = self.reserved.get() + bytes;
        if self.bound != 0 && r > self.bound {
            return false;
        }
        self.reserved.set(r);
        true
    }

    fn release(&self, bytes: usize) {
        self.reserved.set(self.reserved.get() - bytes);
    }
}

/// Frees `p` and gives its descriptor back to `owner`.
fn free(list: &HugeList, owner: &Owner, p: *mut u8, now: u64) {
    // SAFETY: `p` is one of the list's allocations, given up here.
    let d = unsafe { list.free(owner, p, now) }.expect("a huge allocation");
    // SAFETY: the descriptor `free` returned.
    unsafe { owner.desc_free(d) };
}

#[test]
fn freed_mappings_are_reused_then_decay() {
    let (list, owner) = (HugeList::new(), Owner::default());
    let size = 5 << 20;
    let p = list.alloc(&owner, size, 8, false, 0, 1000);
    assert!(!p.is_null());
    assert_eq!(list.totals(), (1, size));
    assert_eq!(list.size_of(p), Some(size));
    // SAFETY: ours, `size` bytes.
    unsafe { p.write_bytes(0x5a, size) };
    free(&list, &owner, p, 10);
    assert_eq!(list.totals(), (0, 0));
    // Within the decay: the same mapping again, zeroed on request.
    let q = list.alloc(&owner, size - 4096, 8, true, 500, 1000);
    assert_eq!(q, p, "the cached mapping is reused");
    // SAFETY: ours, at least `size - 4096` bytes.
    assert_eq!(unsafe { *q.add(size - 4097) }, 0);
    free(&list, &owner, q, 600);
    // Past the decay: aged out; a trim finds nothing left.
    list.age(&owner, 600 + 1000, 1000);
    assert_eq!(list.trim(&owner), 0);
    assert_eq!(owner.live.get(), 0, "every descriptor came back");
}

/// Eight 5 MiB buffers live at once, freed, and made again: all eight come
/// from the cache (the byte bound holds them; four slots did not).
#[test]
fn a_round_of_several_buffers_is_reused_whole() {
    let (list, owner) = (HugeList::new(), Owner::default());
    let size = 5 << 20;
    let first: Vec<*mut u8> = (0..8)
        .map(|_| list.alloc(&owner, size, 8, false, 0, 1000))
        .collect();
    for &p in &first {
        assert!(!p.is_null());
        free(&list, &owner, p, 1);
    }
    assert_eq!(list.cached_bytes(), 8 * size);
    let mut again: Vec<*mut u8> = (0..8)
        .map(|_| list.alloc(&owner, size, 8, false, 2, 1000))
        .collect();
    assert_eq!(list.cached_bytes(), 0, "every buffer came from the cache");
    let mut first = first;
    first.sort();
    again.sort();
    assert_eq!(again, first);
    for &p in &again {
        free(&list, &owner, p, 3);
    }
    assert_eq!(list.trim(&owner), 8 * size);
    assert_eq!(owner.live.get(), 0);
}

#[test]
fn trim_and_remap_and_alignment() {
    let (list, owner) = (HugeList::new(), Owner::default());
    let p = list.alloc(&owner, 6 << 20, 8 << 20, false, 0, 1000);
    assert_eq!(p as usize % (8 << 20), 0, "aligned beyond a page");
    free(&list, &owner, p, 0);
    assert_eq!(list.trim(&owner), 6 << 20, "the cached mapping goes back");
    let p = list.alloc(&owner, 5 << 20, 8, false, 0, 1000);
    // SAFETY: ours; grown with mremap, then freed at its new address.
    unsafe {
        p.write(7);
        let q = list.remap(&owner, p, 9 << 20).expect("a huge allocation");
        assert!(!q.is_null());
        assert_eq!(q.read(), 7);
        assert_eq!(list.totals(), (1, 9 << 20));
        free(&list, &owner, q, 0);
    }
    assert_eq!(list.size_of(p), None);
    list.trim(&owner);
    assert_eq!(owner.live.get(), 0);
    assert_eq!(owner.reserved.get(), 0);
}

/// The owner's bound (`KMEM_MAX`) holds the mapped bytes, exactly: a mapping or a
/// growth past it is refused (nothing mapped, nothing leaked), a shrink or an
/// unmap gives bytes back, and a cached mapping keeps its bytes until unmapped.
#[test]
fn the_owners_bound_counts_mapped_bytes() {
    let list = HugeList::new();
    list.set_bounded(true);
    let owner = Owner {
        bound: 20 << 20,
        ..Owner::default()
    };
    let a = list.alloc(&owner, 8 << 20, 8, false, 0, 1000);
    let b = list.alloc(&owner, 8 << 20, 8, false, 0, 1000);
    assert!(!a.is_null() && !b.is_null());
    assert_eq!(owner.reserved.get(), 16 << 20);
    assert!(list.alloc(&owner, 5 << 20, 8, false, 0, 1000).is_null());
    assert_eq!((owner.reserved.get(), owner.live.get()), (16 << 20, 2));
    // SAFETY: ours; a failed growth leaves it as it was, a shrink moves nothing.
    unsafe {
        assert!(list.remap(&owner, a, 13 << 20).unwrap().is_null());
        assert_eq!(list.size_of(a), Some(8 << 20));
        let a2 = list.remap(&owner, a, 4 << 20).unwrap();
        assert!(!a2.is_null());
        assert_eq!(owner.reserved.get(), 12 << 20);
        free(&list, &owner, a2, 0);
    }
    // Cached, still mapped: its bytes stay taken.
    assert_eq!(list.cached_bytes(), 4 << 20);
    assert_eq!(owner.reserved.get(), 12 << 20);
    // Taken again by a smaller request, whole: nothing more is taken.
    let c = list.alloc(&owner, 3 << 20, 8, false, 1, 1000);
    assert!(!c.is_null());
    assert_eq!(owner.reserved.get(), 12 << 20);
    free(&list, &owner, c, 2);
    free(&list, &owner, b, 2);
    assert_eq!(list.cached_bytes(), 12 << 20);
    assert_eq!(owner.reserved.get(), 12 << 20);
    // 17 MiB: the largest cached mapping (8 MiB) cannot grow within the bound, so
    // it is unmapped; the other still holds 4 MiB, and the request fails. Once
    // the cache is trimmed (as the heap does at its bound) it fits.
    assert!(list.alloc(&owner, 17 << 20, 8, false, 3, 1000).is_null());
    assert_eq!(
        (list.cached_bytes(), owner.reserved.get()),
        (4 << 20, 4 << 20)
    );
    assert_eq!(list.trim(&owner), 4 << 20);
    assert_eq!(owner.reserved.get(), 0);
    let d = list.alloc(&owner, 17 << 20, 8, false, 4, 1000);
    assert!(!d.is_null());
    assert_eq!(owner.reserved.get(), 17 << 20);
    free(&list, &owner, d, 5);
    assert_eq!(list.trim(&owner), 17 << 20);
    assert_eq!(owner.reserved.get(), 0);
    assert_eq!(owner.live.get(), 0);
}

#[test]
fn the_cache_takes_the_smallest_that_fits_else_grows_the_largest() {
    let (list, owner) = (HugeList::new(), Owner::default());
    const M: usize = 1 << 20;
    // Mappings of 20, 30, 12, 8, 10 and 6 MiB live at once (86 MiB: the bound),
    // freed in turn: all cached.
    let sizes = [20 * M, 30 * M, 12 * M, 8 * M, 10 * M, 6 * M];
    let ps: Vec<*mut u8> = sizes
        .iter()
        .map(|&n| list.alloc(&owner, n, 8, false, 0, 1000))
        .collect();
    assert_eq!(list.cache_bound(), 86 * M);
    for (t, &p) in ps.iter().enumerate() {
        free(&list, &owner, p, t as u64);
    }
    assert_eq!(list.cached_bytes(), 86 * M);
    // 9 MiB: the smallest that holds it (10 MiB), whole.
    let a = list.alloc(&owner, 9 * M, 8, false, 10, 1000);
    assert_eq!(a, ps[4]);
    assert_eq!(list.size_of(a), Some(10 * M));
    // 40 MiB: none holds it; the largest (30 MiB) grows, its contents kept.
    // SAFETY: cached mapping of ours, 30 MiB, nobody uses it.
    unsafe { ps[1].write(0x42) };
    let b = list.alloc(&owner, 40 * M, 8, false, 11, 1000);
    assert_eq!(list.size_of(b), Some(40 * M));
    // SAFETY: ours, grown from the 30 MiB mapping.
    assert_eq!(unsafe { b.read() }, 0x42, "the resident pages moved along");
    assert_eq!(list.cached_bytes(), 46 * M);
    // Both freed: 96 MiB would pass the bound (the 86 MiB peak), so the oldest
    // (20 MiB) goes.
    free(&list, &owner, a, 12);
    free(&list, &owner, b, 12);
    assert_eq!(list.trim(&owner), 76 * M);
    assert_eq!(owner.live.get(), 0);
}

/// The byte bound is the peak of live bytes since the decay interval began:
/// above the floor it holds a whole round; once a new interval starts with fewer
/// bytes live, the oldest cached mappings go to make room for the newest.
#[test]
fn the_cache_holds_up_to_the_recent_peak_and_keeps_the_newest() {
    let (list, owner) = (HugeList::new(), Owner::default());
    const M: usize = 1 << 20;
    let (a, b) = (
        list.alloc(&owner, 40 * M, 8, false, 0, 1000),
        list.alloc(&owner, 40 * M, 8, false, 0, 1000),
    );
    assert_eq!(list.cache_bound(), 80 * M, "the peak, above the floor");
    // A new interval with both live: the peak stays 80 MiB; a frees into the cache.
    list.age(&owner, 1100, 1000);
    assert_eq!(list.cache_bound(), 80 * M);
    free(&list, &owner, a, 1200);
    assert_eq!(list.cached_bytes(), 40 * M);
    // The next interval starts with 40 MiB live: the floor decides (64 MiB), and
    // b's mapping, the newest, pushes a's out.
    list.age(&owner, 2150, 1000);
    assert_eq!(list.cache_bound(), CACHE_MIN_BYTES);
    assert_eq!(list.cached_bytes(), 40 * M, "a was freed within the decay");
    free(&list, &owner, b, 2200);
    assert_eq!(list.cached_bytes(), 40 * M, "only the newest stays");
    let c = list.alloc(&owner, 40 * M, 8, false, 2300, 1000);
    assert_eq!(c, b, "the newest came back");
    free(&list, &owner, c, 2400);
    list.trim(&owner);
    assert_eq!(owner.live.get(), 0);
}

#[test]
fn a_bounded_heap_caches_no_more_than_the_floor() {
    let (list, owner) = (HugeList::new(), Owner::default());
    const M: usize = 1 << 20;
    list.set_bounded(true);
    let ps: Vec<*mut u8> = (0..4)
        .map(|_| list.alloc(&owner, 30 * M, 8, false, 0, 1000))
        .collect();
    assert_eq!(list.cache_bound(), CACHE_MIN_BYTES, "120 MiB peak, bounded");
    for (t, &p) in ps.iter().enumerate() {
        free(&list, &owner, p, t as u64);
    }
    assert_eq!(list.cached_bytes(), 60 * M, "two of four within 64 MiB");
    assert_eq!(
        owner.reserved.get(),
        60 * M,
        "the cached ones hold the bound"
    );
    list.set_bounded(false);
    assert_eq!(list.cache_bound(), 120 * M);
    list.trim(&owner);
    assert_eq!(owner.live.get(), 0);
    assert_eq!(owner.reserved.get(), 0);
}

/// A mapping grown over the cached mapping right after it takes that mapping's head
/// (the rest stays cached) and stays where it is: no `mremap`, no fresh pages, no
/// more of the bound. Without it the growth moved the mapping and faulted its new
/// half in.
#[test]
fn a_growing_mapping_takes_the_cached_tail_after_it() {
    const M: usize = 1 << 20;
    let list = HugeList::new();
    let owner = Owner {
        bound: 64 * M,
        ..Owner::default()
    };
    let big = list.alloc(&owner, 40 * M, 8, false, 0, 1000);
    assert!(!big.is_null());
    free(&list, &owner, big, 1);
    // 8 MiB: the head of the 40 MiB mapping; its 32 MiB tail stays cached.
    let p = list.alloc(&owner, 8 * M, 8, false, 2, 1000);
    assert_eq!(p, big);
    assert_eq!(list.cached_bytes(), 32 * M);
    // SAFETY: ours: 8 MiB, then grown in place to 16 and 40 MiB.
    unsafe {
        p.write(0x5a);
        assert_eq!(list.remap(&owner, p, 16 * M), Some(p));
        assert_eq!((list.totals(), list.cached_bytes()), ((1, 16 * M), 24 * M));
        p.add(16 * M - 1).write(0xa5);
        assert_eq!(list.remap(&owner, p, 40 * M), Some(p));
        assert_eq!((list.totals(), list.cached_bytes()), ((1, 40 * M), 0));
        assert_eq!((p.read(), p.add(16 * M - 1).read()), (0x5a, 0xa5));
    }
    assert_eq!(
        owner.reserved.get(),
        40 * M,
        "the cached bytes held the bound"
    );
    free(&list, &owner, p, 3);
    assert_eq!(list.trim(&owner), 40 * M);
    assert_eq!((owner.live.get(), owner.reserved.get()), (0, 0));
}

/// A tail taken that way may be a second mapping of the kernel's (here: made one by
/// advice on part of the range), which `mremap` refuses to treat as one: the growth
/// past it answers `None`, for the caller to move the allocation (null would fail
/// a `realloc` that a copy can serve).
#[test]
fn a_remap_the_kernel_refuses_leaves_the_move_to_the_caller() {
    const M: usize = 1 << 20;
    let (list, owner) = (HugeList::new(), Owner::default());
    let big = list.alloc(&owner, 16 * M, 8, false, 0, 1000);
    free(&list, &owner, big, 1);
    let p = list.alloc(&owner, 4 * M, 8, false, 2, 1000);
    assert_eq!(p, big);
    // SAFETY: the cached tail, 12 MiB of ours; advice only, nothing unmapped. It
    // splits the kernel's mapping at p + 4 MiB (MADV_DONTFORK changes its flags).
    let r = unsafe { libc::madvise(p.add(4 * M).cast(), 12 * M, libc::MADV_DONTFORK) };
    assert_eq!(r, 0);
    // SAFETY: ours, 4 MiB; grown over the tail, then past it.
    unsafe {
        assert_eq!(list.remap(&owner, p, 8 * M), Some(p));
        p.add(8 * M - 1).write(1);
        assert_eq!(list.remap(&owner, p, 20 * M), None, "two mappings");
        assert_eq!(list.size_of(p), Some(8 * M), "left as it was");
        assert_eq!(p.add(8 * M - 1).read(), 1);
    }
    free(&list, &owner, p, 3);
    assert_eq!(list.trim(&owner), 16 * M);
    assert_eq!((owner.live.get(), owner.reserved.get()), (0, 0));
}

/// On a kernel with 64 KiB pages (pretended), mappings and the parts the cache splits
/// them into are whole kernel pages: a split inside one would leave two mappings
/// sharing it, and unmapping one would unmap the other's first bytes.
#[test]
fn mappings_are_sized_in_kernel_pages() {
    const K: usize = 1 << 10;
    let (list, owner) = (HugeList::new(), Owner::default());
    let page = 64 * K;
    list.set_page_size(page);
    // (This kernel's mappings start on its own pages only: offsets from the mapping's
    // start are what a 64 KiB kernel's addresses would be.)
    let whole = |list: &HugeList, start: *mut u8| {
        let head = list.head.lock();
        head.1
            .as_slice()
            .iter()
            .all(|c| (c.addr - start as usize).is_multiple_of(page) && c.len.is_multiple_of(page))
    };
    let a = list.alloc(&owner, 100_000, 8, false, 0, 1000);
    assert_eq!(list.size_of(a), Some(2 * page));
    // SAFETY: ours, 128 KiB; grown by 4 KiB, which takes a whole page more.
    let a = unsafe { list.remap(&owner, a, 2 * page + 4 * K) }.expect("ours");
    assert_eq!(list.size_of(a), Some(3 * page));
    free(&list, &owner, a, 1);
    // 10,000 bytes from the 192 KiB cached: one page, the rest cached apart.
    let b = list.alloc(&owner, 10_000, 8, false, 2, 1000);
    assert_eq!(
        (list.size_of(b), list.cached_bytes()),
        (Some(page), 2 * page)
    );
    assert!(whole(&list, b));
    // Grown by a byte over the cached rest: a whole page of it.
    // SAFETY: ours, one page.
    assert_eq!(unsafe { list.remap(&owner, b, page + 1) }, Some(b));
    assert_eq!(
        (list.size_of(b), list.cached_bytes()),
        (Some(2 * page), page)
    );
    assert!(whole(&list, b));
    free(&list, &owner, b, 3);
    assert_eq!(list.trim(&owner), 3 * page);
    assert_eq!((owner.live.get(), owner.reserved.get()), (0, 0));
}

/// Hundreds of live mappings, found by address in the lists: each one's size, a
/// growth that moves it (listed again under its new address: the old one is no
/// longer one), a shrink in place, and the frees, in an order unlike the allocations'.
#[test]
fn many_mappings_are_found_by_address_as_they_move() {
    let (list, owner) = (HugeList::new(), Owner::default());
    let page = list.page();
    let n = 600;
    let mut ps: Vec<(*mut u8, usize)> = (0..n)
        .map(|i| {
            let len = (1 + i % 3) * page;
            let p = list.alloc(&owner, len, 8, false, 0, 1000);
            assert!(!p.is_null());
            (p, len)
        })
        .collect();
    assert_eq!(list.totals().0, n);
    let mut moved = 0;
    for (i, (p, len)) in ps.iter_mut().enumerate() {
        assert_eq!(list.size_of(*p), Some(*len), "mapping {i}");
        // SAFETY: ours: marked, grown (most move: the next mapping is in the way),
        // shrunk, its mark kept.
        unsafe {
            p.write(i as u8);
            let q = list.remap(&owner, *p, *len + 5 * page).expect("ours");
            assert!(!q.is_null());
            if q != *p {
                moved += 1;
                assert_eq!(list.size_of(*p), None, "the old address, mapping {i}");
            }
            let r = list.remap(&owner, q, *len).expect("ours");
            assert_eq!((r, r.read()), (q, i as u8));
            *p = q;
        }
        assert_eq!(list.size_of(*p), Some(*len));
    }
    assert!(moved > 0, "no growth moved");
    for i in (0..n).rev().step_by(2).chain((0..n).step_by(2)) {
        let (p, len) = ps[i];
        assert_eq!(list.size_of(p), Some(len));
        free(&list, &owner, p, 1);
        assert_eq!(list.size_of(p), None);
    }
    assert_eq!(list.totals(), (0, 0));
    list.trim(&owner);
    assert_eq!((owner.live.get(), owner.reserved.get()), (0, 0));
}
