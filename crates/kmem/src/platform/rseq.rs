//! Restartable sequences for per-CPU mode (`KMEM_PERCPU=cpu-rseq`; Linux, x86_64).
//!
//! glibc (2.35+) registers a `struct rseq` for every thread; the kernel keeps its
//! `cpu_id` current and, if the thread is preempted, migrated or signalled while its
//! instruction pointer is inside a registered critical section, restarts it at the
//! section's abort handler. A section that ends in one plain store therefore commits
//! atomically with respect to everything else that runs on that CPU — as tcmalloc's
//! per-CPU caches do, without any atomic instruction.
//!
//! Three sections, on the `kmem_cache_cpu` of the cache at `cpu_offset` in the CPU
//! area of the CPU the thread is on (`region + (cpu_id << 16)`: the CPU areas of
//! per-CPU rseq mode sit in one region at a fixed stride, as tcmalloc's per-CPU slabs
//! do, so that no load from a table of areas lengthens each section's chain of
//! loads):
//! - [`pop`]: `obj = freelist`; decode its free pointer (hardening key) and check it
//!   lies in the slab; commit `freelist = next`;
//! - [`push`]: if `freelist` is in the object's slab (the CPU slab), write the
//!   object's encoded free pointer and commit `freelist = obj`;
//! - [`sheaf_pop_at`], [`sheaf_push_at`] (sheaves design; [`sheaf_pop`] and
//!   [`sheaf_push`] take the cache's config): on the CPU's spare sheaf, where the
//!   frees went, or its main sheaf when the spare is empty (pop), or its spare sheaf
//!   (push) of the `kmem_cache_cpu` at a given offset, whose tops (`sheaf + 8 *
//!   count`) sit in it: read the top, read or write the slot beside it, commit the top
//!   less or plus 8 (a top the lock holder took is 0: no objects, and the push tests
//!   it for no room); the push first checks that the object starts one of the cache's
//!   objects (the `free_*` words of the same line), so the front ends' free needs
//!   nothing but the object's page before it;
//! - [`take_on`]: on CPU `cpu` only, commit `freelist = 0` and return the old value
//!   (how the slab layer's lock holder takes a CPU freelist or a sheaf's top on its
//!   own CPU; see the rules in kmem-core's `slab` module). From another CPU it takes
//!   with [`fence`] (`heap::rseq_take`).
//!
//! Each section arms `rseq->rseq_cs` with its descriptor (`__rseq_cs`, 32-byte
//! aligned: version, flags, start, length up to and including the commit, abort), and
//! its abort handler sits in `__rseq_failure` behind the signature the kernel checks
//! (`RSEQ_SIG`, 0x53053053, as the last four bytes of a `ud1` instruction, as librseq
//! does on x86) and jumps back to re-arm and start over.
//!
//! Owns no state. Locking: none — a section is atomic against everything else on its
//! CPU by construction; what the slab layer may do to a CPU freelist meanwhile (only
//! commit on that CPU, take it with a fence, or work on it while it is 0) is the
//! callers' contract. Every section refuses a 0 word and none commits 0, which the
//! take relies on.
//! [`on_cpu`] changes the calling thread's affinity for the length of a call;
//! [`fence`] restarts the section another CPU runs (`membarrier`), registered once
//! ([`can_fence`]: a static that says whether the kernel allowed it).

use kmem_core::slab::sheaf::SHEAF_HEADER;
use kmem_core::slab::{
    CacheConfig, FREELIST_OFFSET, FREE_MASK_OFFSET, FREE_START_LIMIT_OFFSET, FREE_START_MUL_OFFSET,
    MAIN_TOP_OFFSET, SHEAF_MAIN_OFFSET, SPARE_LIMIT_OFFSET, SPARE_OFFSET, SPARE_TOP_OFFSET,
};
use std::mem::offset_of;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// A critical section's start: arm `rseq->rseq_cs` (offset 8) with the descriptor at
/// label 23 (label 20, where an abort comes back to), then label 21, the section's
/// first instruction. Uses the `{t}` and `{rseq}` operands.
macro_rules! rseq_arm {
    () => {
        "20:\n\
         lea {t}, [rip + 23f]\n\
         mov qword ptr fs:[{rseq} + 8], {t}\n\
         21:"
    };
}

/// In a section: `{cc}` = the CPU area of the CPU the thread runs on (`cpu_id` at
/// offset 4; its area at `{region} + (cpu_id << 16)`, room for `{len}` CPUs); to label
/// 25 (no commit) for a CPU id past the region. The place of a CPU without an area
/// reads as zero bytes: every sequence reads its words as an empty freelist, empty
/// sheaves and no room, and goes to label 25 with no test of the area here. Uses `{t}`. (No newline at the end:
/// [`rseq_this_cpu`] and [`rseq_this_cpu_at`] add the `kmem_cache_cpu`'s offset.)
macro_rules! rseq_cpu_area {
    () => {
        "mov {t:e}, dword ptr fs:[{rseq} + 4]\n\
         cmp {t}, {len}\n\
         jae 25f\n\
         shl {t}, 16\n\
         lea {cc}, [{region} + {t}]\n"
    };
}

/// In a section: `{cc}` = the `kmem_cache_cpu` of the cache `{cfg}` in the area of the
/// CPU the thread runs on ([`rseq_cpu_area`], then the cache's `cpu_offset`).
macro_rules! rseq_this_cpu {
    () => {
        concat!(rseq_cpu_area!(), "add {cc}, qword ptr [{cfg} + {off_cpu}]")
    };
}

/// [`rseq_this_cpu`] with the `kmem_cache_cpu`'s offset in a register: `{cc}` = the
/// CPU area of the CPU the thread runs on plus `{off}`.
macro_rules! rseq_this_cpu_at {
    () => {
        concat!(rseq_cpu_area!(), "add {cc}, {off}")
    };
}

/// A section's descriptor (`__rseq_cs`, 32-byte aligned: version 0, flags 0, start at
/// label 21, length to label 22 — just past the commit — and abort at label 24) and its
/// abort handler (`__rseq_failure`: the `ud1` whose last four bytes are `RSEQ_SIG`,
/// then back to label 20 to re-arm and start over).
macro_rules! rseq_descriptor {
    () => {
        ".pushsection __rseq_cs, \"aw\"\n\
         .balign 32\n\
         23:\n\
         .long 0, 0\n\
         .quad 21b, 22b - 21b, 24f\n\
         .popsection\n\
         .pushsection __rseq_failure, \"ax\"\n\
         .byte 0x0f, 0xb9, 0x3d\n\
         .long 0x53053053\n\
         24:\n\
         jmp 20b\n\
         .popsection"
    };
}

/// The end of a push section, after its commit: `{res}` = 1 (label 22, committed),
/// 2 (label 27: the object is already on top, a double free) or 0 (label 25: not
/// done), then label 26.
macro_rules! rseq_push_end {
    () => {
        "22:\n\
         mov {res:e}, 1\n\
         jmp 26f\n\
         27:\n\
         mov {res:e}, 2\n\
         jmp 26f\n\
         25:\n\
         xor {res:e}, {res:e}\n\
         26:"
    };
}

/// CPUs the region of CPU areas has room for (CPU ids at or past it: no area).
pub const TABLE_LEN: usize = super::MAX_CPU_IDS;

/// The calling thread's `struct rseq`, named by its offset from the thread pointer
/// (glibc's `__rseq_offset`): the sections address it as `fs:[offset + field]`, so
/// that reaching `cpu_id` is one load rather than two (the thread pointer from `fs:0`,
/// then the field). The same for every thread; meaningful only with the `fs` base of a
/// thread glibc registered (all of them, once [`area`] returns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RseqArea(isize);

/// The calling thread's `struct rseq`, if glibc registered one.
#[inline]
pub fn area() -> Option<RseqArea> {
    super::linux::rseq_offset().map(RseqArea)
}

/// [`area`] without its test, for a caller that knows it returned `Some` before (on
/// any thread: glibc registers every thread at the same offset, and the offset once
/// found never changes). Per-CPU rseq mode is chosen only then, so a thread whose
/// fast word is the rseq tag may use this.
///
/// # Safety
/// [`area`] has returned `Some` in this process. (Otherwise the sections would
/// address the TCB's own words as a `struct rseq`.)
#[inline(always)]
pub unsafe fn area_known() -> RseqArea {
    let off = super::linux::rseq_offset_raw();
    debug_assert_ne!(off, 0);
    RseqArea(off)
}

/// Pops an object from the CPU freelist of the cache `cfg` on the CPU the thread runs
/// on; 0 when there is none (no area for the CPU yet, an empty freelist, or a corrupt
/// link: the caller takes the locked path, which reports the latter).
///
/// # Safety
/// `rseq` is the calling thread's registered `struct rseq`; `region` holds
/// [`TABLE_LEN`] places of `CPU_AREA_SIZE` bytes, each a CPU area in which
/// `cfg.cpu_offset` holds the cache's `kmem_cache_cpu` (its freelist at
/// [`FREELIST_OFFSET`]) or, for a CPU without one yet, zero bytes never written; `cfg` is that
/// cache's live config with `rseq` set (no other context changes a CPU's freelist
/// except by committing on that CPU, by exchanging it for 0 (a take with a fence), or
/// while it is 0).
#[inline]
pub unsafe fn pop(rseq: RseqArea, region: *const u8, cfg: &CacheConfig) -> usize {
    let obj: usize;
    // SAFETY: the caller's contract. Inside the section every load is from the
    // area's `kmem_cache_cpu`, or the free pointer word of an object that
    // is on this CPU's freelist at that instant (nothing else can change it before the
    // commit without restarting us); the commit is the last instruction before label
    // 22. Inputs are never written, so a restart finds them intact.
    unsafe {
        std::arch::asm!(
            rseq_arm!(),
            rseq_this_cpu!(),
            "mov {obj}, qword ptr [{cc} + {off_fl}]",
            "test {obj}, {obj}",
            "jz 25f",
            "test {obj}, 1",
            "jnz 25f",
            "mov {at}, {obj}",
            "add {at}, qword ptr [{cfg} + {off_fp}]",
            "mov {next}, qword ptr [{at}]",
            "bswap {at}",
            "and {at}, qword ptr [{cfg} + {off_mask}]",
            "xor {at}, qword ptr [{cfg} + {off_random}]",
            "xor {next}, {at}",
            "mov {at}, {obj}",
            "xor {at}, {next}",
            "cmp {at}, {slab}",
            "jae 25f",
            "mov qword ptr [{cc} + {off_fl}], {next}",
            "22:",
            "jmp 26f",
            "25:",
            "xor {obj:e}, {obj:e}",
            "26:",
            rseq_descriptor!(),
            rseq = in(reg) rseq.0,
            region = in(reg) region,
            cfg = in(reg) cfg as *const CacheConfig,
            slab = in(reg) cfg.slab_bytes(),
            len = const TABLE_LEN,
            off_cpu = const offset_of!(CacheConfig, cpu_offset),
            off_fp = const offset_of!(CacheConfig, offset),
            off_fl = const FREELIST_OFFSET,
            off_mask = const offset_of!(CacheConfig, harden_mask),
            off_random = const offset_of!(CacheConfig, random),
            obj = out(reg) obj,
            t = out(reg) _,
            cc = out(reg) _,
            at = out(reg) _,
            next = out(reg) _,
            options(nostack),
        );
    }
    obj
}

pub use super::Pushed;

/// Pushes `obj` (an object of the slab at `base`, owned by the caller) on the CPU
/// freelist of the cache `cfg` on the CPU the thread runs on, if that slab is the CPU
/// slab there.
///
/// # Safety
/// As [`pop`]; `obj` is the start of an object of the cache, in the slab at `base`,
/// and the caller gives it up.
#[inline]
pub unsafe fn push(
    rseq: RseqArea,
    region: *const u8,
    cfg: &CacheConfig,
    obj: usize,
    base: usize,
) -> Pushed {
    let res: usize;
    // SAFETY: the caller's contract. The store into the object (its encoded free
    // pointer) is the caller's own memory; the commit is the last instruction before
    // label 22. Inputs are never written.
    unsafe {
        std::arch::asm!(
            rseq_arm!(),
            rseq_this_cpu!(),
            "mov {cur}, qword ptr [{cc} + {off_fl}]",
            "test {cur}, {cur}",
            "jz 25f",
            "mov {t}, {cur}",
            "sub {t}, {base}",
            "cmp {t}, {slab}",
            "jae 25f",
            "cmp {cur}, {obj}",
            "je 27f",
            "mov {at}, {obj}",
            "add {at}, qword ptr [{cfg} + {off_fp}]",
            "mov {t}, {at}",
            "bswap {t}",
            "and {t}, qword ptr [{cfg} + {off_mask}]",
            "xor {t}, qword ptr [{cfg} + {off_random}]",
            "xor {t}, {cur}",
            "mov qword ptr [{at}], {t}",
            "mov qword ptr [{cc} + {off_fl}], {obj}",
            rseq_push_end!(),
            rseq_descriptor!(),
            rseq = in(reg) rseq.0,
            region = in(reg) region,
            cfg = in(reg) cfg as *const CacheConfig,
            obj = in(reg) obj,
            base = in(reg) base,
            slab = in(reg) cfg.slab_bytes(),
            len = const TABLE_LEN,
            off_cpu = const offset_of!(CacheConfig, cpu_offset),
            off_fp = const offset_of!(CacheConfig, offset),
            off_fl = const FREELIST_OFFSET,
            off_mask = const offset_of!(CacheConfig, harden_mask),
            off_random = const offset_of!(CacheConfig, random),
            res = out(reg) res,
            t = out(reg) _,
            cc = out(reg) _,
            cur = out(reg) _,
            at = out(reg) _,
            options(nostack),
        );
    }
    match res {
        1 => Pushed::Done,
        2 => Pushed::AtHead,
        _ => Pushed::No,
    }
}

/// Pops an object from the spare sheaf of the cache `cfg` on the CPU the thread runs
/// on, or from its main sheaf when the spare is empty (sheaves design); 0 when there is
/// none (no area for the CPU yet, or both sheaves are empty or taken by the lock
/// holder: their words are 0).
///
/// # Safety
/// As [`sheaf_pop_at`] with the cache's `cpu_offset`: `cfg` is the live config of a
/// cache with `FastPath::SheafRseq`.
#[inline]
pub unsafe fn sheaf_pop(rseq: RseqArea, region: *const u8, cfg: &CacheConfig) -> usize {
    // SAFETY: forwarded; a cache's `cpu_offset` never changes.
    unsafe { sheaf_pop_at(rseq, region, cfg.cpu_offset) }
}

// Each sheaf's pointer sits one word after its top, so the pop tests either sheaf from
// the address of its top.
const _: () = assert!(SHEAF_MAIN_OFFSET == MAIN_TOP_OFFSET + 8);
const _: () = assert!(SPARE_OFFSET == SPARE_TOP_OFFSET + 8);

/// Pops an object from the spare sheaf (where the frees went) of the
/// `kmem_cache_cpu` at offset `off` of the CPU area of the CPU the thread runs on, or
/// from the main sheaf when the spare is empty; 0 when there is none (no area for the
/// CPU yet, or both sheaves are empty or taken by the lock holder: a top at most its
/// sheaf's address, 0 when taken).
///
/// Popping the spare is what thread mode's swap of the two sheaves does, without the
/// swap: in this mode a swap is the locked slow path (the area's lock, two takes, two
/// installs), which an allocation after a run of frees otherwise paid once a sheaf
/// (`bench percpu` fastpath_reuse_2t: 15–20 ns a pair). The spare comes first: a
/// program that frees and allocates in turn gets back the object it freed last, its
/// line still in the cache, and the pop tests one sheaf instead of two (the main
/// sheaf, first before, was empty in that steady state: 4.68–4.75 ns a pair became
/// 4.46–4.49).
///
/// # Safety
/// `rseq` is the calling thread's registered `struct rseq`; `region` holds
/// [`TABLE_LEN`] places of `CPU_AREA_SIZE` bytes, each zero bytes never written (a CPU
/// without an area yet) or a CPU area in which `off` holds the
/// `kmem_cache_cpu` of a cache with `FastPath::SheafRseq` (the `cpu_offset` of such a
/// cache; no other context changes a CPU's sheaves except by committing on that CPU,
/// by exchanging a top for 0 (a take with a fence), or after taking their words). The caller marks the slab of an accounted kmalloc
/// cache's object it hands out (`Slub::note_uncharged`), as `Heap::rseq_alloc`
/// does; the size tables' offsets are the plain caches'.
#[inline]
pub unsafe fn sheaf_pop_at(rseq: RseqArea, region: *const u8, off: usize) -> usize {
    let obj: usize;
    // SAFETY: the caller's contract. Inside the section every load is from the
    // area's `kmem_cache_cpu` (`cc` stays inside it: moved at most once,
    // from the spare's top to the main's), or the two slots below the top `t` of the
    // sheaf whose top `[cc + off_stop]` addresses (a top above the sheaf's address, one
    // word after the top, means that sheaf holds objects in the slots below it; below
    // slot 0 is the sheaf's header); the prefetch reads nothing a program sees; the
    // commit is the store of the new top, the last instruction before label 22. A
    // restart computes `cc` afresh. Inputs are never written.
    unsafe {
        std::arch::asm!(
            rseq_arm!(),
            rseq_this_cpu_at!(),
            // The spare sheaf's top, else, when the spare is empty, the main's: `cc`
            // moves by the distance between the two tops, so that the one commit
            // below, `[cc + off_stop]`, stores either. A taken top is 0, at most any
            // sheaf's address: empty.
            "mov {t}, qword ptr [{cc} + {off_stop}]",
            "cmp {t}, qword ptr [{cc} + {off_stop} + 8]",
            "ja 31f",
            "add {cc}, {main_less_spare}",
            "mov {t}, qword ptr [{cc} + {off_stop}]",
            "cmp {t}, qword ptr [{cc} + {off_stop} + 8]",
            "jbe 25f",
            "31:",
            "mov {obj}, qword ptr [{t} + {hdr} - 8]",
            // The next pop's object asked for, as thread mode's pop does (the word
            // below slot 0 is the header's capacity: a harmless prefetch).
            "mov {w}, qword ptr [{t} + {hdr} - 16]",
            "prefetcht0 byte ptr [{w}]",
            "sub {t}, 8",
            "mov qword ptr [{cc} + {off_stop}], {t}",
            "22:",
            // Nothing found (both sheaves empty, or a CPU past the region): out of
            // line, so that a pop falls through with no jump.
            ".pushsection .text.unlikely, \"ax\"",
            "25:",
            "xor {obj:e}, {obj:e}",
            "jmp 22b",
            ".popsection",
            rseq_descriptor!(),
            rseq = in(reg) rseq.0,
            region = in(reg) region,
            off = in(reg) off,
            len = const TABLE_LEN,
            off_stop = const SPARE_TOP_OFFSET,
            main_less_spare = const MAIN_TOP_OFFSET as isize - SPARE_TOP_OFFSET as isize,
            hdr = const SHEAF_HEADER,
            obj = out(reg) obj,
            t = out(reg) _,
            w = out(reg) _,
            cc = out(reg) _,
            options(nostack),
        );
    }
    obj
}

/// Pushes `obj` (an object of the cache `cfg`, owned by the caller) onto the spare
/// sheaf of the CPU the thread runs on (the one frees go to), if it has room.
/// `AtHead`: `obj` is already the sheaf's top (a double free; not done).
///
/// # Safety
/// As [`sheaf_push_at`] with the cache's `cpu_offset`.
#[inline]
pub unsafe fn sheaf_push(
    rseq: RseqArea,
    region: *const u8,
    cfg: &CacheConfig,
    obj: usize,
) -> Pushed {
    // SAFETY: forwarded; a cache's `cpu_offset` never changes.
    unsafe { sheaf_push_at(rseq, region, cfg.cpu_offset, obj) }
}

/// Pushes `obj` onto the spare sheaf of the `kmem_cache_cpu` at offset `off` of the
/// CPU the thread runs on, if it has room and `obj` starts an object of the sheaf's
/// cache (the object-start test of the free fast path, with the `free_*` words of the
/// same line: written before the spare's word, so a spare with room always comes with
/// its cache's checks). `No` leaves `obj` untouched (no area, no room, or not an
/// object's start: the regular path decides and reports); `AtHead`: `obj` is already
/// the sheaf's top (a double free; not done).
///
/// # Safety
/// As [`sheaf_pop_at`]; `obj` lies in a slab of the cache whose `cpu_offset` is `off`
/// and the caller gives it up if it starts an object there.
#[inline]
pub unsafe fn sheaf_push_at(rseq: RseqArea, region: *const u8, off: usize, obj: usize) -> Pushed {
    // SAFETY: the caller's contract. A top that is not 0 and below the limit means a
    // spare sheaf with room whose cache's object checks are in the same line (both
    // installed before the top); the slot store is at the top, beyond the committed
    // objects (a restart leaves it unused), and the commit is the store of the new
    // top, the last instruction before label 22. The slot below the top of an empty
    // sheaf is its capacity word, never an object. Inputs are never written. The
    // refusals leave the section for the label blocks (no commit); a committed push
    // falls through, with no result to test.
    unsafe {
        std::arch::asm!(
            rseq_arm!(),
            rseq_this_cpu_at!(),
            // The top: 0 while the lock holder has taken it (below any limit, so
            // tested on its own), else room while it is below the limit.
            "mov {n}, qword ptr [{cc} + {off_top}]",
            "test {n}, {n}",
            "jz {no}",
            "cmp {n}, qword ptr [{cc} + {off_slimit}]",
            "jae {no}",
            "mov {t}, qword ptr [{cc} + {off_mask}]",
            "and {t}, {obj}",
            "imul {t}, qword ptr [{cc} + {off_mul}]",
            "cmp {t}, qword ptr [{cc} + {off_limit}]",
            "jae {no}",
            "cmp qword ptr [{n} + {hdr} - 8], {obj}",
            "je {at_head}",
            "mov qword ptr [{n} + {hdr}], {obj}",
            "add {n}, 8",
            "mov qword ptr [{cc} + {off_top}], {n}",
            "22:",
            // Label 25 (a CPU past the region) is the refusal too.
            ".pushsection .text.unlikely, \"ax\"",
            "25:",
            "jmp {no}",
            ".popsection",
            rseq_descriptor!(),
            rseq = in(reg) rseq.0,
            region = in(reg) region,
            off = in(reg) off,
            obj = in(reg) obj,
            len = const TABLE_LEN,
            off_top = const SPARE_TOP_OFFSET,
            off_slimit = const SPARE_LIMIT_OFFSET,
            off_mask = const FREE_MASK_OFFSET,
            off_mul = const FREE_START_MUL_OFFSET,
            off_limit = const FREE_START_LIMIT_OFFSET,
            hdr = const SHEAF_HEADER,
            no = label {
                return Pushed::No;
            },
            at_head = label {
                return Pushed::AtHead;
            },
            t = out(reg) _,
            cc = out(reg) _,
            n = out(reg) _,
            options(nostack),
        );
    }
    Pushed::Done
}

/// On CPU `cpu` only: replaces `*freelist` with 0 and returns the old value; `None`
/// if the thread is not running on `cpu`.
///
/// # Safety
/// `rseq` is the calling thread's registered `struct rseq`; `freelist` is the
/// `freelist` word of a `kmem_cache_cpu` in CPU `cpu`'s area.
#[inline]
pub unsafe fn take_on(rseq: RseqArea, cpu: usize, freelist: *mut usize) -> Option<usize> {
    let v: usize;
    let ok: usize;
    // SAFETY: the caller's contract; the commit (the store of 0) is the last
    // instruction before label 22. Inputs are never written.
    unsafe {
        std::arch::asm!(
            rseq_arm!(),
            "mov {t:e}, dword ptr fs:[{rseq} + 4]",
            "cmp {t}, {cpu}",
            "jne 25f",
            "mov {v}, qword ptr [{fl}]",
            "mov qword ptr [{fl}], 0",
            "22:",
            "mov {ok:e}, 1",
            "jmp 26f",
            "25:",
            "xor {ok:e}, {ok:e}",
            "xor {v:e}, {v:e}",
            "26:",
            rseq_descriptor!(),
            rseq = in(reg) rseq.0,
            cpu = in(reg) cpu,
            fl = in(reg) freelist,
            v = out(reg) v,
            ok = out(reg) ok,
            t = out(reg) _,
            options(nostack),
        );
    }
    (ok != 0).then_some(v)
}

/// What [`on_cpu`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum OnCpu<R> {
    /// `f` ran pinned to the CPU; its result.
    Ran(R),
    /// The CPU is offline or outside the CPUs the process may use (its cpuset): the
    /// thread may not run there.
    NotAllowed,
    /// The thread could not be pinned to the CPU (`sched_setaffinity` refused: a
    /// seccomp or LSM policy, a deadline thread) or its affinity could not be read (a
    /// mask past 1024 CPUs).
    Failed,
}

impl<R> OnCpu<R> {
    /// `f`'s result if it ran.
    pub fn ran(self) -> Option<R> {
        match self {
            OnCpu::Ran(r) => Some(r),
            _ => None,
        }
    }
}

/// Runs `f` pinned to CPU `cpu` (`sched_setaffinity`), then restores the thread's
/// affinity.
pub fn on_cpu<R>(cpu: usize, f: impl FnOnce() -> R) -> OnCpu<R> {
    // SAFETY: cpu_set_t is plain data; the calls get valid pointers and sizes, and
    // only this thread's affinity (pid 0) changes, restored below.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut old) != 0 {
            return OnCpu::Failed;
        }
        if cpu >= libc::CPU_SETSIZE as usize {
            return OnCpu::NotAllowed;
        }
        // A CPU outside this thread's affinity may still be one the process may use
        // (the program pinned its threads to CPUs of their own): the kernel decides.
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        if libc::sched_setaffinity(0, size, &one) != 0 {
            // EINVAL: the CPU is offline or outside the process's CPU set; anything
            // else: not pinnable.
            let offline = std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL);
            return if offline {
                OnCpu::NotAllowed
            } else {
                OnCpu::Failed
            };
        }
        let r = f();
        libc::sched_setaffinity(0, size, &old);
        OnCpu::Ran(r)
    }
}

/// Whether this thread can be pinned to a CPU of its own affinity: its affinity
/// reads, and setting it to itself is allowed. Per-CPU rseq mode needs it where the
/// kernel refuses [`fence`] (see `heap::rseq_take`).
pub fn can_pin() -> bool {
    // SAFETY: as in `on_cpu`; the affinity is set to what it was.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        libc::sched_getaffinity(0, size, &mut mask) == 0
            && libc::sched_setaffinity(0, size, &mask) == 0
    }
}

/// Whether CPU `cpu` is in this thread's affinity now (false where it cannot tell).
pub fn allowed(cpu: usize) -> bool {
    // SAFETY: as in `on_cpu`; nothing is changed.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        libc::sched_getaffinity(0, size, &mut mask) == 0
            && cpu < libc::CPU_SETSIZE as usize
            && libc::CPU_ISSET(cpu, &mask)
    }
}

/// `membarrier(2)`'s expedited rseq fence, its registration, and the flag that aims it
/// at one CPU (`linux/membarrier.h`; Linux 5.10).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_long = 1;

/// Whether this process may use [`fence`]: 0 not asked yet, 1 registered, 2 refused
/// (a kernel before 5.10, a seccomp policy).
static FENCE: AtomicU8 = AtomicU8::new(0);

/// Fences run (counted on success): how often a take reached another CPU's sequences.
static FENCES: AtomicUsize = AtomicUsize::new(0);

/// How many [`fence`]s this process has run: each is a take of a word of another
/// CPU's area (a flush, a drain, a lock holder moved to another CPU), an interrupt on
/// that CPU where a thread of ours runs there.
pub fn fences() -> usize {
    FENCES.load(Ordering::Relaxed)
}

/// Registers the process for [`fence`] the first time it is asked, and says whether
/// it may use it (the answer is kept). Registering costs a few microseconds in a
/// process of one thread and an RCU grace period in one of several (15 ms here), so
/// per-CPU rseq mode asks when it is chosen, at the heap's first use.
pub fn can_fence() -> bool {
    match FENCE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = register_fence();
            FENCE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

fn register_fence() -> bool {
    // SAFETY: a system call without pointer arguments; it changes only the state of
    // this process's address space.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
            0,
            0,
        ) == 0
    }
}

/// Restarts the restartable sequence, if any, that a thread of this process is in on
/// CPU `cpu` (`membarrier`'s expedited rseq command aimed at that CPU: an interrupt
/// there, with a full barrier on both sides). When it returns, a section that was
/// running there before the call has committed or will start over, and reads what
/// this thread wrote before the call. True when done (a CPU offline, or running none
/// of this process's threads, needs nothing: done too); false where the kernel
/// refuses (a seccomp policy set after [`can_fence`] said yes). [`can_fence`] first.
pub fn fence(cpu: usize) -> bool {
    let Ok(cpu) = libc::c_int::try_from(cpu) else {
        return false;
    };
    for _ in 0..2 {
        // SAFETY: a system call without pointer arguments; it interrupts that CPU and
        // changes nothing this process sees but the restart of a section.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
                MEMBARRIER_CMD_FLAG_CPU,
                cpu,
            )
        };
        if r == 0 {
            FENCES.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        // EPERM: not registered (a fork's child inherits the registration on the
        // kernels seen; this covers one that does not): register and try once more.
        let unregistered = std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !unregistered || !register_fence() {
            return false;
        }
    }
    false
}

// The sections find CPU `id`'s area at `region + (id << 16)` (`rseq_cpu_area`).
const _: () = assert!(kmem_core::percpu::CPU_AREA_SIZE == 1 << 16);
