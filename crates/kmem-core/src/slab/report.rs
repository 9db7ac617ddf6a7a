//! Reports of the slab layer in the kernel's format (`slab_err`, corrupt free pointers).

use super::*;
use crate::page::Page;
use crate::platform::Platform;
use crate::printk::LogWriter;
use core::fmt::Write as _;
use core::ptr::NonNull;

impl<'a, P: Platform> Slub<'a, P> {
    #[cold]
    #[inline(never)]
    pub(crate) fn report_corrupt_link(&self, cfg: &CacheConfig, obj: usize, next: usize) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(
            w,
            "============================================================================="
        );
        let _ = writeln!(w, "BUG {} (Not tainted): Freepointer corrupt", cfg.name());
        let _ = writeln!(
            w,
            "-----------------------------------------------------------------------------"
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "INFO: Object 0x{obj:016x} holds a free pointer that decodes to 0x{next:016x}, outside its slab");
        let _ = writeln!(w, "FIX {}: Isolating the rest of the freelist", cfg.name());
        self.pages.count_bad_object();
    }

    // -----------------------------------------------------------------------
    // Reports.

    /// `slab_err`: a report in the kernel's format; the object is left alone.
    #[cold]
    #[inline(never)]
    pub(crate) fn report(
        &self,
        s: &KmemCache,
        slab: Option<NonNull<Page>>,
        msg: &str,
        addr: usize,
    ) {
        self.report_named(s.name(), slab, msg, addr);
    }

    /// `slab_err` with a cache name of the caller's choosing (`kmalloc` for pointers
    /// that belong to no cache). `slab`, if given, heads a live slab (its state is
    /// printed).
    #[cold]
    #[inline(never)]
    pub(crate) fn report_named(
        &self,
        name: &str,
        slab: Option<NonNull<Page>>,
        msg: &str,
        addr: usize,
    ) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(
            w,
            "============================================================================="
        );
        let _ = writeln!(w, "BUG {} (Not tainted): {} 0x{:016x}", name, msg, addr);
        let _ = writeln!(
            w,
            "-----------------------------------------------------------------------------"
        );
        let _ = writeln!(w);
        if let Some(slab) = slab {
            // SAFETY: a live slab page.
            let sr = unsafe { slab.as_ref() };
            let st = Slab::of(sr).state();
            let _ = writeln!(
                w,
                "Slab 0x{:016x} objects={} used={} fp=0x{:016x} flags=0x{:x}",
                slab.as_ptr() as usize,
                Slab::of(sr).cache().config().objects,
                st.inuse(),
                self.slab_base(slab) + st.offset() as usize,
                sr.flags().bits()
            );
        }
        let _ = writeln!(w, "FIX {}: Object at 0x{:016x} not freed", name, addr);
        self.pages.count_bad_object();
    }

    /// `__kmem_cache_shutdown`'s report: `s` still has `live` objects in `slabs` slabs.
    #[cold]
    pub fn report_objects_remaining(&self, s: &KmemCache, live: usize, slabs: usize) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(
            w,
            "kmem_cache_destroy {}: Slab cache still has objects",
            s.name()
        );
        let _ = writeln!(
            w,
            "============================================================================="
        );
        let _ = writeln!(
            w,
            "BUG {} (Not tainted): Objects remaining in {} on __kmem_cache_shutdown()",
            s.name(),
            s.name()
        );
        let _ = writeln!(
            w,
            "-----------------------------------------------------------------------------"
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "INFO: {live} objects in {slabs} slabs remain");
    }
}
