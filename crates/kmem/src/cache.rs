//! `KmemCache<T>`: a slab cache for one Rust type (`kmem_cache_create` for `T`), and
//! `KBox<T>`, an owned object of it that goes back to its cache when dropped.
//!
//! Two kinds of cache:
//! - [`KmemCache::new`]: `alloc(value)` moves a value into a fresh object; dropping the
//!   `KBox` drops the value and frees the object.
//! - [`KmemCache::with_constructor`]: like the kernel's `ctor`, the constructor runs
//!   once per object when its slab is made, and objects keep a valid `T` for as long as
//!   the cache lives — while free too. [`KmemCache::alloc_constructed`] hands out an
//!   object as its last user left it (or as constructed), and dropping its `KBox`
//!   returns it *without* dropping the value (so `T`'s `Drop` never runs for objects
//!   of such a cache: use it for types whose state is worth keeping, not for types
//!   that own resources). `alloc(value)` replaces the kept value (dropping the old one).
//!   The constructor may allocate, free and call the heap: it runs while the thread's
//!   CPU area may be half-way through refilling this cache's sheaves, so what it does
//!   takes the paths without a CPU area (`Platform::callout_enter`).
//!
//! Send/Sync: objects are allocated on one thread and may be dropped on another, where
//! the value is dropped or kept; so the cache is `Send + Sync` when `T: Send`. A `KBox`
//! is `Send`/`Sync` exactly when `T` is, as `Box` is.
//!
//! Owns nothing but the raw cache of each [`KmemCache`]; no lock of its own (objects
//! come and go through the heap's `kmem_cache_*` calls and their CPU-area rules).

use crate::heap::heap;
use kmem_core::slab::DestroyError;
use kmem_core::slab::{Ctor, KmemCache as RawCache};
use kmem_core::{Gfp, SlabFlags};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

/// A slab cache of `T` objects (`kmem_cache_create` for a Rust type): objects of one
/// size packed in slabs, allocated and freed on the calling thread's CPU area without a
/// lock, listed in `/proc/slabinfo`-style reports under its name.
///
/// ```
/// let points = kmem::KmemCache::<[f64; 3]>::new("points").unwrap();
/// let p = points.alloc([1.0, 2.0, 3.0]).unwrap(); // a KBox: freed to its cache on drop
/// assert_eq!(p[1], 2.0);
/// assert_eq!(points.raw().name(), "points");
/// drop(p);
/// ```
pub struct KmemCache<T> {
    raw: &'static RawCache,
    constructed: bool,
    _t: PhantomData<fn(T) -> T>,
}

// SAFETY: the raw cache is thread-safe; values cross threads only as T (moved in by
// alloc, dropped by any thread's KBox drop), which `T: Send` allows.
unsafe impl<T: Send> Send for KmemCache<T> {}
// SAFETY: as above; `&KmemCache<T>` only allocates and frees through the raw cache.
unsafe impl<T: Send> Sync for KmemCache<T> {}

/// An owned `T` in a [`KmemCache`]; freed to its cache on drop.
pub struct KBox<'c, T> {
    ptr: NonNull<T>,
    cache: &'c KmemCache<T>,
}

// SAFETY: a KBox owns its T like a Box does.
unsafe impl<T: Send> Send for KBox<'_, T> {}
// SAFETY: shared access to a KBox is shared access to its T.
unsafe impl<T: Sync> Sync for KBox<'_, T> {}

fn construct<T>(p: *mut u8, data: usize) {
    // SAFETY: `data` is the `fn() -> T` stored by `with_constructor` (function pointers
    // fit in a usize); `p` is a new object of a cache laid out for `T`.
    unsafe {
        let f = std::mem::transmute::<usize, fn() -> T>(data);
        ptr::write(p as *mut T, f());
    }
}

impl<T> KmemCache<T> {
    fn create(name: &str, ctor: Option<Ctor>) -> Option<Self> {
        let size = std::mem::size_of::<T>().max(1);
        let align = std::mem::align_of::<T>();
        let raw = heap().kmem_cache_create_ctor(name, size, align, SlabFlags::empty(), ctor)?;
        Some(Self {
            raw,
            constructed: ctor.is_some(),
            _t: PhantomData,
        })
    }

    /// A cache named `name` for `T` (named as in /proc/slabinfo). `None` if `T` is too
    /// large for a slab (above 1 MiB, `kmem_core::slab::MAX_OBJECT_SIZE`) or aligned
    /// beyond a page.
    pub fn new(name: &str) -> Option<Self> {
        Self::create(name, None)
    }

    /// A cache whose objects are built by `ctor` once, when their slab is made, and
    /// keep their value while free (see the module doc).
    pub fn with_constructor(name: &str, ctor: fn() -> T) -> Option<Self> {
        Self::create(
            name,
            Some(Ctor {
                f: construct::<T>,
                data: ctor as usize,
            }),
        )
    }

    /// The underlying kmem cache (for statistics and reports), borrowed for as long
    /// as this cache lives (its drop destroys it).
    pub fn raw(&self) -> &RawCache {
        self.raw
    }

    fn object(&self) -> Option<NonNull<T>> {
        heap()
            .kmem_cache_alloc(self.raw, Gfp::KERNEL)
            .map(|p| p.cast::<T>())
    }

    /// Moves `value` into a new object. `None` (and `value` dropped) when memory runs
    /// out.
    pub fn alloc(&self, value: T) -> Option<KBox<'_, T>> {
        let ptr = self.object()?;
        // SAFETY: a fresh object sized and aligned for T; in a constructed cache it
        // holds a valid T, which the assignment drops.
        unsafe {
            if self.constructed {
                *ptr.as_ptr() = value;
            } else {
                ptr::write(ptr.as_ptr(), value);
            }
        }
        Some(KBox { ptr, cache: self })
    }

    /// An object of a constructed cache, holding whatever value it kept (as built by
    /// the constructor, or as its last user left it). `None` for a cache made without
    /// a constructor, or when memory runs out.
    pub fn alloc_constructed(&self) -> Option<KBox<'_, T>> {
        if !self.constructed {
            return None;
        }
        let ptr = self.object()?;
        Some(KBox { ptr, cache: self })
    }

    /// Moves every value of `values` into new objects at once
    /// (`kmem_cache_alloc_bulk`): all or nothing (`None` drops the values).
    pub fn alloc_bulk(&self, values: Vec<T>) -> Option<Vec<KBox<'_, T>>> {
        let mut raw = vec![ptr::null_mut::<u8>(); values.len()];
        if heap().kmem_cache_alloc_bulk(self.raw, Gfp::KERNEL, &mut raw) != raw.len() {
            return None;
        }
        Some(
            raw.into_iter()
                .zip(values)
                .map(|(p, v)| {
                    let ptr = NonNull::new(p as *mut T).expect("bulk slots are filled");
                    // SAFETY: as in `alloc`.
                    unsafe {
                        if self.constructed {
                            *ptr.as_ptr() = v;
                        } else {
                            ptr::write(ptr.as_ptr(), v);
                        }
                    }
                    KBox { ptr, cache: self }
                })
                .collect(),
        )
    }

    /// Gives many objects back at once (`kmem_cache_free_bulk`). Objects of another
    /// cache are dropped one by one.
    pub fn free_bulk(&self, boxes: Vec<KBox<'_, T>>) {
        let mut raw = Vec::with_capacity(boxes.len());
        for b in boxes {
            if !ptr::eq(b.cache, self) {
                drop(b);
                continue;
            }
            let b = std::mem::ManuallyDrop::new(b);
            if !self.constructed {
                // SAFETY: the KBox owned a valid T, dropped once here.
                unsafe { ptr::drop_in_place(b.ptr.as_ptr()) };
            }
            raw.push(b.ptr.as_ptr() as *mut u8);
        }
        // SAFETY: every pointer is an object of this cache that we own.
        unsafe { heap().kmem_cache_free_bulk(self.raw, &mut raw) };
    }

    /// Frees the cache's empty slabs (`kmem_cache_shrink`); returns how many.
    pub fn shrink(&self) -> usize {
        heap().kmem_cache_shrink(self.raw)
    }
}

impl<T> Drop for KmemCache<T> {
    fn drop(&mut self) {
        // No KBox outlives the cache (they borrow it), so only leaked boxes can be
        // left; then the raw cache stays (reported) rather than being freed under them.
        // SAFETY: nobody else uses this raw cache: it is private to this KmemCache.
        let r = unsafe { heap().kmem_cache_destroy(self.raw) };
        debug_assert!(matches!(r, Ok(()) | Err(DestroyError::ObjectsRemaining(_))));
    }
}

impl<T> Deref for KBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the object holds a valid T for as long as the KBox owns it.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for KBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` gives exclusive access.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for KBox<'_, T> {
    fn drop(&mut self) {
        // SAFETY: we own a valid T in an object of `cache`: drop it unless the cache
        // keeps constructed values, then give the object back.
        unsafe {
            if !self.cache.constructed {
                ptr::drop_in_place(self.ptr.as_ptr());
            }
            heap().kmem_cache_free(self.cache.raw, self.ptr.cast::<u8>());
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for KBox<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}
