//! A fork's child in thread mode: the CPU areas of the parent's other threads are
//! orphaned. Those threads do not exist in the child and may have been half-way
//! through an update of their area (a sheaf half flushed to its slabs while the area
//! still names it full), so nothing in the child flushes them again: before,
//! `kmem_cache_destroy` flushed every area, and objects already back in their slabs
//! went to a barn a second time, to be handed out twice.
//!
//! The test makes the orphan deterministic: a thread of the parent holds freed objects
//! of a cache in its sheaves and waits while the main thread forks. In the child the
//! forking thread's area is the only owner counted, the cache cannot be destroyed (the
//! orphan's objects stay counted), and the cache goes on handing out distinct objects;
//! a shrink asks the child's own area to drain, and writes no orphan's.

use kmem::config::PerCpuMode;
use kmem::{heap, Gfp, SlabFlags};
use std::collections::HashSet;
use std::sync::mpsc;

#[global_allocator]
static A: kmem::KmemAlloc = kmem::KmemAlloc;

#[test]
fn a_fork_child_leaves_the_other_threads_areas_alone() {
    if heap().percpu_mode() != PerCpuMode::Thread {
        eprintln!("skipped: areas are per thread only in thread mode");
        return;
    }
    let cache = heap()
        .kmem_cache_create("fork-orphans", 512, 8, SlabFlags::empty(), None)
        .unwrap();
    let addr = cache as *const kmem::RawKmemCache as usize;
    let (filled, wait) = (mpsc::channel(), mpsc::channel::<()>());
    let worker = std::thread::spawn(move || {
        // SAFETY: a cache of this heap, never destroyed in the parent.
        let cache = unsafe { &*(addr as *const kmem::RawKmemCache) };
        let objs: Vec<_> = (0..32)
            .map(|_| heap().kmem_cache_alloc(cache, Gfp::KERNEL).unwrap())
            .collect();
        for p in objs {
            // SAFETY: allocated above, freed once: onto this thread's sheaves.
            unsafe { heap().kmem_cache_free(cache, p) };
        }
        filled.0.send(()).unwrap();
        wait.1.recv().unwrap();
    });
    filled.1.recv().unwrap();
    // SAFETY: fork; the child uses the heap and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Only this thread's area counts among the owners (the per-CPU page lists'
        // budget is shared by them): before, every thread of the parent did.
        if heap().page_allocator().cpu_areas().nr_owned() != 1 {
            // SAFETY: _exit skips the copied process's atexit handlers and stdio.
            unsafe { libc::_exit(6) };
        }
        // A shrink asks every owner to flush at its next call: this thread's area
        // gets the request, the orphans none (no owner would do it, and each write
        // copied a page of the parent's).
        heap().shrink_all();
        let asked = heap()
            .page_allocator()
            .cpu_areas()
            .iter()
            .filter(|a| a.is_owned() && a.drain_requested() != 0)
            .count();
        if asked != 1 {
            // SAFETY: as above.
            unsafe { libc::_exit(7) };
        }
        // SAFETY: no other thread of the child uses the cache.
        let code = match unsafe { heap().kmem_cache_destroy(cache) } {
            // The orphan's sheaf was flushed: the old behaviour.
            Ok(()) => 3,
            Err(kmem_core::slab::DestroyError::ObjectsRemaining(n)) if n >= 32 => {
                let objs: Vec<_> = (0..10_000)
                    .map(|_| heap().kmem_cache_alloc(cache, Gfp::KERNEL).unwrap())
                    .collect();
                let distinct: HashSet<usize> = objs.iter().map(|p| p.as_ptr() as usize).collect();
                if distinct.len() == objs.len() {
                    0
                } else {
                    4
                }
            }
            Err(_) => 5,
        };
        // SAFETY: _exit skips the copied process's atexit handlers and stdio.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    wait.0.send(()).unwrap();
    worker.join().unwrap();
    assert!(libc::WIFEXITED(status), "child died: {status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "3: the orphan's area was flushed; 4: an object handed out twice; 5: another error; \
         6: the orphans count as owners; 7: not this thread's area alone asked to drain"
    );
}
