//! kmem-core without std: the template for a kernel.
//!
//! Everything a kernel author has to write to run kmem-core is here:
//! 1. a [`Platform`] over memory the kernel owns — here a `static` byte array (no
//!    mmap, no OS calls but `write` for the log);
//! 2. one `static` [`Kmem`], initialised once over a span of that memory;
//! 3. a `#[global_allocator]` on top of `kmalloc`/`kfree`, so that `alloc`'s `Box`,
//!    `Vec` and `String` work.
//!
//! It is a `#![no_std]`, `#![no_main]` program for the host target, built with
//! `panic = "abort"`; the C runtime's startup code calls [`main`] and libc supplies
//! `write` and `abort`. A kernel replaces those two with its console and its halt.
//!
//! ## The span
//! [`Kmem::init`] takes a span whose base is aligned to [`SECTION_SIZE`] (128 MiB)
//! and whose length is any number of pages above 2 MiB (the first section's memmap:
//! 64 bytes of descriptor per 4 KiB page of a whole section). Here the span is
//! [`SPAN_LEN`] = 32 MiB: 2 MiB of memmap, 30 MiB of pages, from which the allocator
//! also takes its own metadata. A kernel puts it at a 128 MiB boundary of physical
//! memory (its linker script or memory map); a `static` cannot ask the loader for
//! that alignment portably, so [`Arena`] has 128 MiB of slack and the span starts at
//! the first boundary inside it. The array is `.bss`: the slack costs address space,
//! never memory, and what the allocator never touches is never faulted in.

#![no_std]
#![no_main]

extern crate alloc;

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::fmt::{self, Write as _};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicU64, Ordering};
use kmem_core::kmalloc::KMALLOC_MAX_SIZE;
use kmem_core::page::SECTION_SIZE;
use kmem_core::{Config, Gfp, Kmem, Platform, SlabFlags, PAGE_SIZE};

/// What libc gives this program; a kernel has its own.
mod sys {
    #[link(name = "c")]
    extern "C" {
        pub fn write(fd: i32, buf: *const u8, count: usize) -> isize;
        pub fn abort() -> !;
    }
}

/// The allocator's span: 32 MiB (any whole number of pages above 2 MiB will do).
const SPAN_LEN: usize = 32 << 20;

/// The memory behind the span, with a section's worth of slack to align it.
#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; SECTION_SIZE + SPAN_LEN]>);

// SAFETY: the arena is only reached through the allocator, which owns the span from
// `Kmem::init` on; nothing else reads or writes it.
unsafe impl Sync for Arena {}

/// Zero-initialised, so in `.bss`: it reads as zero until written, as
/// [`Platform::section_online`] requires of memory it brings online.
static ARENA: Arena = Arena(UnsafeCell::new([0; SECTION_SIZE + SPAN_LEN]));

/// The span's base: the first section boundary in the arena.
fn span_base() -> *mut u8 {
    let start = ARENA.0.get() as *mut u8;
    let skip = (SECTION_SIZE - start as usize % SECTION_SIZE) % SECTION_SIZE;
    start.wrapping_add(skip)
}

/// Writes text to a file descriptor (1: output, 2: log).
struct Fd(i32);

impl fmt::Write for Fd {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s.as_bytes();
        while !rest.is_empty() {
            // SAFETY: `rest` is a live byte slice of the given length.
            let n = unsafe { sys::write(self.0, rest.as_ptr(), rest.len()) };
            if n <= 0 {
                return Err(fmt::Error);
            }
            rest = &rest[n as usize..];
        }
        Ok(())
    }
}

/// The platform: memory from [`ARENA`], a counter for a clock, the log on fd 2.
struct StaticPlatform {
    ticks: AtomicU64,
}

impl Platform for StaticPlatform {
    unsafe fn section_online(&self, addr: *mut u8, len: usize, _nid: usize) -> bool {
        // The arena is always mapped and, never written before, reads as zero: there
        // is nothing to do but check the section is ours.
        let base = span_base() as usize;
        addr as usize >= base && addr as usize + len <= base + SPAN_LEN
    }

    unsafe fn report_free(&self, addr: *mut u8, len: usize) {
        // There is nowhere to give memory back to; zero it, as the contract asks
        // (reported memory must read as zero when the allocator hands it out again).
        // SAFETY: the allocator owns these `len` bytes of the arena and nobody uses
        // them while it reports them.
        unsafe { ptr::write_bytes(addr, 0, len) };
    }

    fn now_ns(&self) -> u64 {
        // No clock: every call is a microsecond later. It only paces the decay of
        // free page reporting.
        self.ticks.fetch_add(1_000, Ordering::Relaxed)
    }

    fn log(&self, text: &str) {
        let _ = Fd(2).write_str(text);
    }
}

/// The allocator. `Kmem::new` is `const`; [`main`] calls `init` once, before the first
/// allocation.
static KMEM: Kmem<StaticPlatform> = Kmem::new(StaticPlatform {
    ticks: AtomicU64::new(0),
});

/// `alloc`'s allocator: kmalloc with no CPU area (every call takes the zone and slab
/// list locks; right from any context, including interrupts). A kernel with per-CPU
/// areas passes this CPU's [`kmem_core::CpuRef`] instead of `None`.
struct KmemAlloc;

/// The kmalloc size that serves `layout`: kmalloc aligns objects to 8 bytes, and an
/// object of a power-of-two size to its size (large blocks too: the span's base is
/// section-aligned), so larger alignments round the size up to a power of two.
fn kmalloc_size(layout: Layout) -> Option<usize> {
    let size = if layout.align() <= 8 {
        layout.size()
    } else {
        layout.size().max(layout.align()).next_power_of_two()
    };
    (size <= KMALLOC_MAX_SIZE).then_some(size)
}

// SAFETY: kmalloc hands out distinct, live blocks of at least the size asked, aligned
// as `kmalloc_size` says; kfree takes back exactly what kmalloc gave.
unsafe impl GlobalAlloc for KmemAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        kmalloc_size(layout)
            .and_then(|size| KMEM.kmalloc(None, size, Gfp::KERNEL))
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        kmalloc_size(layout)
            .and_then(|size| KMEM.kzalloc(None, size, Gfp::KERNEL))
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
        // SAFETY: `p` came from `alloc` and the caller gives it up.
        unsafe { KMEM.kfree(None, p) };
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // krealloc keeps the object where it still fits (its alignment stays), or
        // moves it to the class for the new size (aligned as that size asks).
        kmalloc_size(new)
            // SAFETY: `p` came from `alloc` and the caller gives it up on success.
            .and_then(|size| unsafe { KMEM.krealloc(None, p, size, Gfp::KERNEL) })
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }
}

#[global_allocator]
static ALLOCATOR: KmemAlloc = KmemAlloc;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let _ = writeln!(Fd(2), "kmem-core no_std: {info}");
    // SAFETY: abort has no preconditions.
    unsafe { sys::abort() }
}

/// The precompiled `alloc` crate is built to unwind, so its unwind tables name the
/// personality routine that std would provide. With `panic = "abort"` nothing ever
/// unwinds and the routine is never called; this stub satisfies the linker (a kernel
/// built with `-Zbuild-std` and `panic = "abort"` needs none).
#[no_mangle]
extern "C" fn rust_eh_personality() {}

/// Counts lines of text written to it.
struct Lines(usize);

impl fmt::Write for Lines {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.bytes().filter(|&b| b == b'\n').count();
        Ok(())
    }
}

/// A kernel-style object for a cache of its own.
#[repr(C)]
struct Node {
    key: u64,
    next: *mut Node,
    payload: [u8; 40],
}

/// The C runtime's entry point (called by crt1's `_start` through
/// `__libc_start_main`): boots the allocator and exercises it.
#[no_mangle]
pub extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    // SAFETY: the span is the arena's, reserved for KMEM alone; this is the only
    // call and nothing allocates before it (no thread exists but this one).
    if let Err(e) = unsafe { KMEM.init(span_base(), SPAN_LEN, Config::default(), 1) } {
        let _ = writeln!(Fd(2), "kmem-core no_std: init failed: {e:?}");
        return 1;
    }

    // alloc's types through the global allocator.
    let boxes: Vec<Box<u64>> = (0..1000u64).map(Box::new).collect();
    assert!(boxes.iter().enumerate().all(|(i, b)| **b == i as u64));
    assert!(boxes
        .iter()
        .all(|b| KMEM.pages.in_span(&**b as *const u64 as *const u8)));
    let mut v: Vec<u32> = Vec::new();
    for i in 0..262_144 {
        v.push(i); // grows by krealloc up to 1 MiB: kmalloc caches, then pages
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x as usize == i));
    let over_aligned = Box::new(Aligned([7; 256]));
    assert_eq!(&*over_aligned as *const Aligned as usize % 256, 0);
    let mut s = String::new();
    for i in 0..100 {
        let _ = write!(s, "{i},");
    }
    assert!(s.starts_with("0,1,2,") && s.ends_with("98,99,"));

    // The kernel API directly: a cache of its own, a big kzalloc, the page allocator.
    let cache = KMEM
        .kmem_cache_create(
            None,
            "nostd_node",
            size_of::<Node>(),
            0,
            SlabFlags::empty(),
            None,
        )
        .expect("kmem_cache_create");
    let mut head: *mut Node = ptr::null_mut();
    for key in 0..500 {
        let obj = KMEM.slub().alloc(None, cache, Gfp::KERNEL).expect("object");
        let node = obj.as_ptr() as *mut Node;
        // SAFETY: a fresh object of `cache`, sized and aligned for a Node.
        unsafe {
            node.write(Node {
                key,
                next: head,
                payload: [key as u8; 40],
            })
        };
        head = node;
    }
    let mut sum = 0;
    while !head.is_null() {
        // SAFETY: every node on the list is a live object of `cache`, freed once.
        unsafe {
            let node = head;
            sum += (*node).key;
            head = (*node).next;
            KMEM.kmem_cache_free(None, cache, NonNull::new_unchecked(node.cast()));
        }
    }
    assert_eq!(sum, 499 * 500 / 2);
    let big = KMEM.kzalloc(None, 3 << 20, Gfp::KERNEL).expect("3 MiB");
    // SAFETY: 3 MiB were just allocated, zeroed.
    let bytes = unsafe { core::slice::from_raw_parts(big.as_ptr(), 3 << 20) };
    assert!(bytes.iter().all(|&b| b == 0));
    // SAFETY: ours, freed once.
    unsafe { KMEM.kfree(None, big.as_ptr()) };
    let page = KMEM
        .pages
        .alloc_pages(None, Gfp::KERNEL, 2)
        .expect("4 pages");
    // SAFETY: ours, freed once.
    unsafe { KMEM.pages.free_pages(None, page, 2) };

    let mut rows = Lines(0);
    KMEM.slabinfo(&mut rows).expect("slabinfo");
    // Sections come online as the allocator needs them: the first at the first
    // allocation (here: the whole 32 MiB span, one partial section).
    let managed = KMEM.pages.nr_managed_pages();
    let in_use = KMEM.pages.nr_allocated_pages();
    drop((boxes, v, over_aligned, s));
    let _ = writeln!(
        Fd(1),
        "kmem-core no_std: 1000 boxes ok, vec of 262144 ok, 500 objects of a cache ok; \
         slabinfo rows {}; {} KiB managed, {} KiB in use",
        rows.0.saturating_sub(2),
        managed * PAGE_SIZE / 1024,
        in_use * PAGE_SIZE / 1024,
    );
    0
}

/// A type aligned beyond kmalloc's 8 bytes.
#[repr(C, align(256))]
struct Aligned([u8; 256]);
