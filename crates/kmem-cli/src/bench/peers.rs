//! The allocators compared: kmem and its peers, each called through its own
//! `GlobalAlloc` value in this process, so ratios hold on a noisy machine.

use std::alloc::{GlobalAlloc, Layout, System};

/// An allocator under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    System,
    Mimalloc,
    Jemalloc,
}

static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

impl Peer {
    pub const ALL: [Peer; 3] = [Peer::System, Peer::Mimalloc, Peer::Jemalloc];

    pub fn name(self) -> &'static str {
        match self {
            Peer::System => "system",
            Peer::Mimalloc => "mimalloc",
            Peer::Jemalloc => "jemalloc",
        }
    }

    /// Allocates through the peer's `GlobalAlloc`.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`: `layout` has a non-zero size.
    #[inline]
    pub unsafe fn alloc(self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                Peer::System => System.alloc(layout),
                Peer::Mimalloc => MIMALLOC.alloc(layout),
                Peer::Jemalloc => JEMALLOC.alloc(layout),
            }
        }
    }

    /// Frees through the peer's `GlobalAlloc`.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc`: `ptr` came from `alloc` of this peer with `layout`.
    #[inline]
    pub unsafe fn dealloc(self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                Peer::System => System.dealloc(ptr, layout),
                Peer::Mimalloc => MIMALLOC.dealloc(ptr, layout),
                Peer::Jemalloc => JEMALLOC.dealloc(ptr, layout),
            }
        }
    }
}
