//! The inline free's range check against its CPU area's copy of the page-tag table's
//! length: an area behind the shared length refuses a new section's objects, and the
//! free slow path takes them and catches the copy up.

mod common;

use common::{config, kmem, own_area};
use kmem_core::Gfp;
use std::ptr::NonNull;

/// The inline free's range check compares with its CPU area's copy of the tag table's
/// length, taken with the area. After a section comes online, an area that has not
/// caught up refuses that section's objects; the free slow path takes the object and
/// catches the copy up, so the next one is freed inline.
#[test]
fn a_new_sections_objects_go_inline_once_the_free_slow_path_has_seen_it() {
    use kmem_core::page::SECTION_SIZE;
    let k = kmem(2, config(1, 0));
    let (_a, c1) = own_area(k);
    let cpu1 = c1.unwrap();
    // The first area's kmalloc-64 gets a spare sheaf with room.
    let x = k.kmalloc(c1, 64, Gfp::KERNEL).unwrap();
    // SAFETY: ours, freed once.
    assert!(unsafe { k.kfree(c1, x.as_ptr()) });
    let (base, _) = k.pages.span();
    let new_lo = base + k.pages.nr_online_sections() * SECTION_SIZE;
    assert!(k.pages.add_memory(0));
    let in_new = |p: NonNull<u8>| (new_lo..new_lo + SECTION_SIZE).contains(&(p.as_ptr() as usize));
    // A second area (which takes the new length with it) fills the old section's 2 MiB
    // blocks, then makes kmalloc-64 slabs until two objects lie in the new section.
    let (_b, c2) = own_area(k);
    let mut held = Vec::new();
    let new_block = loop {
        let page = k.pages.alloc_pages(c2, Gfp::KERNEL, 9).unwrap();
        if in_new(k.pages.page_address(page)) {
            break page;
        }
        held.push(page);
    };
    // SAFETY: allocated just above with order 9.
    unsafe { k.pages.free_pages(c2, new_block, 9) };
    let mut objs = Vec::new();
    let mut fresh = Vec::new();
    while fresh.len() < 2 {
        let p = k.kmalloc(c2, 64, Gfp::KERNEL).unwrap();
        if in_new(p) {
            fresh.push(p);
        } else {
            objs.push(p);
        }
        assert!(objs.len() < 1 << 20, "no object in the new section");
    }
    // The first area's copy is behind: refused inline, taken by the slow path.
    // SAFETY: ours; refused, so still ours.
    let inline = unsafe { k.kfree_fast(cpu1, fresh[0].as_ptr()) };
    assert!(!inline, "copy behind");
    // SAFETY: ours, freed once.
    let slow = unsafe { k.kfree_sheaf_slow(cpu1, fresh[0].as_ptr()) };
    assert_eq!(slow, Some(true));
    // SAFETY: ours, freed once.
    let inline = unsafe { k.kfree_fast(cpu1, fresh[1].as_ptr()) };
    assert!(inline, "caught up");
    for p in objs {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(c2, p.as_ptr()) });
    }
    for page in held {
        // SAFETY: allocated above with order 9.
        unsafe { k.pages.free_pages(c2, page, 9) };
    }
    assert!(k.pages.platform().take_log().is_empty());
}
