//! The caches' freelist keys come from a pool of `getrandom` words (one system call
//! for many caches): every key is its own, across refills of the pool, and a fork
//! child never hands out the words its parent hands out next.

use kmem::{heap, SlabFlags};

#[global_allocator]
static GLOBAL: kmem::KmemAlloc = kmem::KmemAlloc;

fn key(name: &str) -> usize {
    heap()
        .kmem_cache_create(name, 72, 8, SlabFlags::empty(), None)
        .expect("cache")
        .config()
        .random
}

#[test]
fn every_cache_gets_a_key_of_its_own_and_a_fork_child_new_ones() {
    // More caches than the pool holds words: keys from several refills.
    let mut keys: Vec<usize> = (0..100).map(|i| key(&format!("pool-{i}"))).collect();
    assert!(keys.iter().all(|&k| k != 0));
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 100, "a key handed out twice");

    let mut fds = [0; 2];
    // SAFETY: a pipe into a valid array of two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only makes caches (kmem is fork-safe), writes and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    let mine: Vec<usize> = (0..4).map(|i| key(&format!("after-fork-{i}"))).collect();
    if pid == 0 {
        let bytes: Vec<u8> = mine.iter().flat_map(|k| k.to_ne_bytes()).collect();
        // SAFETY: writing our buffer to the pipe, then leaving without unwinding.
        unsafe {
            libc::write(fds[1], bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0);
        }
    }
    let mut buf = [0u8; 32];
    // SAFETY: reading into our buffer; waiting for our child.
    let (n, status) = unsafe {
        let n = libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        (n, status)
    };
    assert_eq!(status, 0);
    assert_eq!(n, 32, "the child's keys");
    let child: Vec<usize> = buf
        .chunks(8)
        .map(|c| usize::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    for k in &child {
        assert!(
            !mine.contains(k),
            "parent {mine:x?} and child {child:x?} share a key"
        );
    }
}
