//! slub_debug's checks pinned directly, on a cache with red zones, poisoning and
//! tracks (Z, P, U) made in the slab layer's test environment.

use super::super::test_env::{slab_env, SlabEnv, CALL_SITE, NOW_NS};
use super::super::Ctor;
use super::*;

const ZPU: SlabFlags = SlabFlags::RED_ZONE
    .union(SlabFlags::POISON)
    .union(SlabFlags::STORE_USER);

const WORD: usize = core::mem::size_of::<usize>();

/// A Z, P, U cache of `size`-byte objects aligned to `align`, and one object of it
/// (its slab is then the cache's only one).
fn debug_object(size: usize, align: usize) -> (&'static SlabEnv, &'static KmemCache, usize) {
    let env = slab_env();
    let s = env.cache("dbg", size, align, ZPU);
    let obj = env.slub().alloc(None, s, Gfp::KERNEL).unwrap().as_ptr() as usize;
    (env, s, obj)
}

/// The base address of the slab holding `obj`.
fn slab_base_of(env: &SlabEnv, obj: usize) -> usize {
    let head = env.pages.virt_to_head_page(obj as *const u8).unwrap();
    env.slub().slab_base(head)
}

/// Every object start of the slab at `base`.
fn objects(cfg: &CacheConfig, base: usize) -> impl Iterator<Item = usize> + '_ {
    (0..cfg.objects).map(move |i| base + i * cfg.size + cfg.red_left)
}

fn bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    // SAFETY: tests read ranges inside a slab they allocated.
    unsafe { core::slice::from_raw_parts(addr as *const u8, len) }
}

fn poke(addr: usize, value: u8) {
    // SAFETY: tests write bytes inside a slab they allocated (and put them back).
    unsafe { (addr as *mut u8).write(value) };
}

fn all(addr: usize, len: usize, value: u8) -> bool {
    bytes(addr, len).iter().all(|&b| b == value)
}

#[test]
fn debug_slot_layout_is_red_zone_object_red_zone_free_pointer_tracks() {
    assert_eq!(TRACK_SIZE, TRACK_FRAMES * WORD + 8 + 4 * 4);
    // Whole words: [rz 8][object 40][rz 8][fp 8][alloc track][free track][orig_size],
    // no padding.
    let cfg = CacheConfig::calculate("dbg", 40, 8, ZPU, None, 2).unwrap();
    assert!(cfg.is_debug() && cfg.off_fast_paths());
    assert_eq!((cfg.red_left, cfg.rz_end), (WORD, 40 + WORD));
    assert_eq!((cfg.offset, cfg.track_off), (48, 56));
    assert_eq!(cfg.orig_off, 56 + 2 * TRACK_SIZE);
    assert_eq!(cfg.size, WORD + 56 + 2 * TRACK_SIZE + WORD);
    assert_eq!(cfg.objects, cfg.slab_bytes() / cfg.size);
    // A size that is not whole words: the right red zone covers the rest of the last
    // word and one word more.
    let odd = CacheConfig::calculate("dbg", 36, 8, ZPU, None, 2).unwrap();
    assert_eq!((odd.rz_end, odd.offset, odd.size), (48, 48, cfg.size));
    // Alignment 64: the left red zone is the alignment, so objects stay aligned; the
    // slot is padded to it.
    let al = CacheConfig::calculate("dbg", 100, 64, ZPU, None, 2).unwrap();
    assert_eq!((al.red_left, al.rz_end, al.offset), (64, 112, 112));
    assert_eq!(al.track_off, 120);
    assert_eq!(
        al.size,
        (64 + 120 + 2 * TRACK_SIZE + WORD).next_multiple_of(64)
    );
    assert_eq!(al.size, 320);
    // Without U there are no tracks (the orig_size word stays, for the kmalloc red
    // zone); without Z or U no orig_size word; without Z no red zones.
    let zp = CacheConfig::calculate("dbg", 40, 8, ZPU - SlabFlags::STORE_USER, None, 2).unwrap();
    assert_eq!((zp.red_left, zp.offset, zp.orig_off), (8, 48, 56));
    assert_eq!(zp.size, 8 + 56 + WORD);
    let p = CacheConfig::calculate("dbg", 40, 8, SlabFlags::POISON, None, 2).unwrap();
    assert_eq!((p.red_left, p.rz_end, p.offset, p.size), (0, 40, 40, 48));
    assert_eq!(p.orig_off, 0);
    // A constructor keeps the object's contents: no poisoning.
    fn ctor(_: *mut u8) {}
    let c = CacheConfig::calculate("dbg", 40, 8, ZPU, Some(Ctor::plain(ctor)), 2).unwrap();
    assert!(!c.flags.contains(SlabFlags::POISON) && c.flags.contains(SlabFlags::RED_ZONE));
}

#[test]
fn a_new_debug_object_is_poisoned_with_inactive_red_zones() {
    let (env, s, p) = debug_object(100, 64);
    let cfg = s.config();
    let slub = env.slub();
    let base = slab_base_of(env, p);
    let tracks = 2 * TRACK_SIZE;
    let pad = cfg.track_off + tracks + WORD;
    let pad_len = cfg.size - cfg.red_left - pad;
    assert_eq!(pad_len, 16);
    for obj in objects(cfg, base).filter(|&o| o != p) {
        assert!(
            all(obj, cfg.object_size - 1, POISON_FREE),
            "poison of {obj:#x}"
        );
        assert_eq!(bytes(obj + cfg.object_size - 1, 1), [POISON_END]);
        assert!(all(obj - cfg.red_left, cfg.red_left, RED_INACTIVE));
        let right = cfg.rz_end - cfg.object_size;
        assert!(all(obj + cfg.object_size, right, RED_INACTIVE));
        assert!(all(obj + cfg.track_off, tracks, 0), "tracks start empty");
        assert!(all(obj + pad, pad_len, POISON_INUSE), "padding");
        assert_eq!(slub.check_poison(cfg, obj), None);
        assert_eq!(slub.check_redzones(cfg, obj, RED_INACTIVE), None);
    }
    // The object handed out: active red zones, contents still poison (no zeroing
    // asked), and its allocation recorded.
    assert!(all(p - cfg.red_left, cfg.red_left, RED_ACTIVE));
    assert!(all(
        p + cfg.object_size,
        cfg.rz_end - cfg.object_size,
        RED_ACTIVE
    ));
    assert_eq!(slub.check_poison(cfg, p), None);
    let t = slub.get_track(cfg, p, Track2::Alloc).unwrap();
    assert_eq!(
        (t.frames[0], t.when_ns, t.tid, t.pid),
        (CALL_SITE, NOW_NS, 7, 42)
    );
    assert_eq!(t.cpu, u32::MAX, "allocated without a CPU area");
    assert_eq!(slub.get_track(cfg, p, Track2::Free).unwrap().when_ns, 0);
    // SAFETY: ours.
    assert!(unsafe { slub.free(None, s, NonNull::new(p as *mut u8).unwrap()) });
    assert!(env.take_log().is_empty());
}

#[test]
fn valid_link_takes_the_end_token_and_object_starts_only() {
    let (env, s, p) = debug_object(40, 8);
    let cfg = s.config();
    let slub = env.slub();
    let base = slab_base_of(env, p);
    assert!(slub.valid_link(cfg, base, base | 1), "the end token");
    for obj in objects(cfg, base) {
        assert!(slub.valid_link(cfg, base, obj), "object {obj:#x}");
        // The slot's start is its left red zone; inside the object is no link.
        assert!(!slub.valid_link(cfg, base, obj - cfg.red_left));
        assert!(!slub.valid_link(cfg, base, obj + 1));
        assert!(!slub.valid_link(cfg, base, obj + WORD));
        assert!(!slub.valid_link(cfg, base, obj + cfg.offset));
    }
    // Outside the slab: before it, past its last object, another slab's end token.
    let past = base + cfg.objects * cfg.size + cfg.red_left;
    assert!(!slub.valid_link(cfg, base, past));
    assert!(!slub.valid_link(cfg, base, base - cfg.size + cfg.red_left));
    assert!(!slub.valid_link(cfg, base, (base + cfg.slab_bytes()) | 1));
    assert!(!slub.valid_link(cfg, base, 0));
}

#[test]
fn check_redzones_finds_the_first_bad_byte() {
    let (env, s, p) = debug_object(40, 8);
    let cfg = s.config();
    let slub = env.slub();
    let right = p + cfg.object_size;
    let left = p - cfg.red_left;
    assert_eq!(slub.check_redzones(cfg, p, RED_ACTIVE), None);
    // Two bad bytes on the right: the first is named, with the zone's range.
    poke(right + 3, 0);
    poke(right + 5, b'X');
    assert_eq!(
        slub.check_redzones(cfg, p, RED_ACTIVE),
        Some((right + 3, right, p + cfg.rz_end))
    );
    // A bad byte on the left comes first.
    poke(left + 6, b'Y');
    assert_eq!(
        slub.check_redzones(cfg, p, RED_ACTIVE),
        Some((left + 6, left, p))
    );
    for a in [right + 3, right + 5, left + 6] {
        poke(a, RED_ACTIVE);
    }
    assert_eq!(slub.check_redzones(cfg, p, RED_ACTIVE), None);
    // Checked against the free value, an allocated object is wrong from its first byte.
    assert_eq!(
        slub.check_redzones(cfg, p, RED_INACTIVE),
        Some((left, left, p))
    );
    // The last byte of the right zone is checked too.
    poke(p + cfg.rz_end - 1, 0);
    let found = slub.check_redzones(cfg, p, RED_ACTIVE);
    assert_eq!(found, Some((p + cfg.rz_end - 1, right, p + cfg.rz_end)));
    poke(p + cfg.rz_end - 1, RED_ACTIVE);
    // Intact again: it frees without a report.
    // SAFETY: ours.
    assert!(unsafe { slub.free(None, s, NonNull::new(p as *mut u8).unwrap()) });
    assert!(env.take_log().is_empty());
}

#[test]
fn check_poison_finds_the_first_bad_byte_of_a_free_object() {
    let (env, s, p) = debug_object(100, 8);
    let cfg = s.config();
    let slub = env.slub();
    let base = slab_base_of(env, p);
    let q = objects(cfg, base).find(|&o| o != p).unwrap();
    let end = q + cfg.object_size;
    assert_eq!(slub.check_poison(cfg, q), None);
    // Past the first word, then one in it: the lower address is named. The range
    // checked for 0x6b stops before the end marker.
    poke(q + 13, b'X');
    let free = |bad| Some((bad, q, end - 1, POISON_FREE));
    assert_eq!(slub.check_poison(cfg, q), free(q + 13));
    poke(q + 2, b'Y');
    assert_eq!(slub.check_poison(cfg, q), free(q + 2));
    poke(q + 13, POISON_FREE);
    poke(q + 2, POISON_FREE);
    // The end marker must be 0xa5, not 0x6b: named with its own byte and range.
    poke(end - 1, POISON_FREE);
    assert_eq!(
        slub.check_poison(cfg, q),
        Some((end - 1, end - 1, end, POISON_END))
    );
    poke(end - 1, POISON_END);
    // The byte before the marker is checked (it is not a whole word from the start).
    poke(end - 2, 0);
    assert_eq!(slub.check_poison(cfg, q), free(end - 2));
    poke(end - 2, POISON_FREE);
    assert_eq!(slub.check_poison(cfg, q), None);
    // Restored: validate finds nothing in the slab.
    assert_eq!(slub.validate(s, &mut |_| {}), 0);
    assert!(env.take_log().is_empty());
}
