//! `KMEM_THP`: on, the pages the heap hands out and its huge mappings are advised
//! transparent huge pages (`MADV_HUGEPAGE`, the `hg` flag of the mapping in
//! /proc/self/smaps), a huge mapping starts on a 2 MiB boundary, and the page
//! descriptors at each section's start are left alone; off (the default), nothing is
//! advised. Each setting runs in a child process (it is read when the heap starts).

use kmem::{heap, Gfp};
use std::alloc::Layout;
use std::process::Command;

const CHILD: &str = "THP_CHILD";
const HPAGE: usize = 2 << 20;

/// The `VmFlags` of the mapping of this process that holds `addr` (from
/// /proc/self/smaps); `None` if no mapping does.
fn vm_flags(addr: usize) -> Option<Vec<String>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.split_whitespace().map(str::to_owned).collect());
            }
        }
    }
    None
}

fn advised(addr: usize) -> bool {
    vm_flags(addr)
        .unwrap_or_else(|| panic!("no mapping holds {addr:#x}"))
        .iter()
        .any(|f| f == "hg")
}

/// In the child: where the advice landed, one line each.
fn report() {
    let h = heap();
    let obj = h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr() as usize;
    let desc = h.virt_to_page(obj as *const u8).unwrap().as_ptr() as usize;
    let layout = Layout::from_size_align(8 << 20, 8).unwrap();
    let huge = h.alloc(layout) as usize;
    assert_ne!(huge, 0);
    assert!(
        !h.page_allocator().in_span(huge as *const u8),
        "8 MiB is a mapping of its own"
    );
    println!("object {}", advised(obj));
    println!("descriptor {}", advised(desc));
    println!("huge {}", advised(huge));
    println!("huge aligned {}", huge.is_multiple_of(HPAGE));
    // SAFETY: allocated above, freed once.
    unsafe {
        h.dealloc(huge as *mut u8);
        h.kfree(obj as *mut u8);
    }
}

fn run_child(thp: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "thp_advice_follows_kmem_thp", "--nocapture"])
        .env(CHILD, "1")
        .env("KMEM_THP", thp)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "KMEM_THP={thp}:\n{stdout}\n{stderr}");
    stdout
}

#[test]
fn thp_advice_follows_kmem_thp() {
    if std::env::var_os(CHILD).is_some() {
        return report();
    }
    // A kernel built without THP refuses the advice: nothing to tell apart there.
    let has_thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
    let on = run_child("on");
    if has_thp {
        for line in [
            "object true",
            "descriptor false",
            "huge true",
            "huge aligned true",
        ] {
            assert!(on.contains(line), "KMEM_THP=on: no {line:?} in\n{on}");
        }
    }
    let off = run_child("off");
    for line in ["object false", "descriptor false", "huge false"] {
        assert!(off.contains(line), "KMEM_THP=off: no {line:?} in\n{off}");
    }
}
