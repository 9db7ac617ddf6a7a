//! Platform implementations. Only this module names an operating system.

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::LinuxPlatform;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod rseq;
