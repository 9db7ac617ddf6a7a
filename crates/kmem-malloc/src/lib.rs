//! libkmem.so: kmem as a drop-in malloc for any program (`LD_PRELOAD=libkmem.so`).
//!
//! This crate builds the shared library that C programs load. The C ABI (the malloc
//! family, fork handlers, thread-exit handling) lands with the malloc-shim issue, on top
//! of the slab and kmalloc layers; until then the library exports nothing and a program
//! preloading it keeps using its own malloc.
