//! The live view read from another process: a child program on kmem (this test binary
//! again, with `KmemAlloc` as its global allocator and no live-view code of its own)
//! holds objects and keeps allocating; the parent reads the child's view through
//! `kmem::live` and checks it against the report the child printed itself. Also: the
//! segment is owner-only, made only once the child has run for its publishing
//! interval, removed at a normal exit, and a killed child's stale segment is
//! recognised and removed.

use kmem::live;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

#[global_allocator]
static GLOBAL: kmem::KmemAlloc = kmem::KmemAlloc;

const CHILD: &str = "KMEM_TEST_LIVE_CHILD";
/// Objects the child holds, and their size (kmalloc-224).
const HELD: usize = 20_000;
const CACHE: &str = "kmalloc-224";
/// 64-byte objects the child frees at once: 6.4 MB, past the barn's 4 MiB.
const TABLE: usize = 100_000;

fn child() {
    let held: Vec<Box<[u8; 200]>> = (0..HELD).map(|_| Box::new([1u8; 200])).collect();
    // A table of 64-byte objects past the barn's 4 MiB, dropped: the barn keeps the
    // rest of it in the spill (the parent's decay interval is long: it stays).
    let table: Vec<Box<[u8; 64]>> = (0..TABLE).map(|_| Box::new([3u8; 64])).collect();
    drop(std::hint::black_box(table));
    let spill = kmem::heap().kmem().barn_spill();
    let s = kmem::stats();
    let row = s
        .caches
        .iter()
        .find(|c| c.name == CACHE)
        .expect("the cache");
    println!(
        "report {} {} {} {} {} {}",
        row.active_objs,
        row.num_objs,
        row.num_slabs,
        s.caches
            .iter()
            .find(|c| c.name == "kmalloc-48")
            .map_or(0, |c| c.objperslab),
        spill.used(),
        spill.limit()
    );
    std::io::stdout().flush().unwrap();
    std::hint::black_box(&held);
    let own = live::segment_file(std::process::id());
    if std::env::var_os("KMEM_TEST_LIVE_EXIT").is_some() {
        // Until the segment exists (the first tick after the interval), then exit:
        // the exit handler must remove it.
        while !own.exists() {
            churn();
        }
        return;
    }
    // Keep allocating (other sizes) until killed: slow paths publish the view.
    loop {
        churn();
    }
}

/// Allocations of another size, for the slow paths that publish the view.
fn churn() {
    let churn: Vec<Box<[u8; 40]>> = (0..2000).map(|_| Box::new([2u8; 40])).collect();
    drop(std::hint::black_box(churn));
    std::thread::sleep(Duration::from_millis(1));
}

/// The segment of `pid`, once it is there (the child makes it at its first tick
/// after its first interval).
fn wait_for_segment(pid: u32) -> std::path::PathBuf {
    let path = live::segment_file(pid);
    let t0 = std::time::Instant::now();
    while !path.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no segment for {pid}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    path
}

// The caller waits for (or kills) the child it gets back.
#[allow(clippy::zombie_processes)]
fn spawn(exit: bool) -> (std::process::Child, Vec<u64>, impl BufRead) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "live_view_from_another_process", "--nocapture"])
        .env(CHILD, "1")
        .env("KMEM_LIVE", "20")
        .env("KMEM_DECAY_MS", "600000")
        .stdout(Stdio::piped());
    if exit {
        cmd.env("KMEM_TEST_LIVE_EXIT", "1");
    }
    let mut c = cmd.spawn().unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
        if let Some(r) = line.strip_prefix("report ") {
            let v = r.split_whitespace().map(|x| x.parse().unwrap()).collect();
            return (c, v, out);
        }
    }
}

#[test]
fn live_view_from_another_process() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let (mut c, own, _out) = spawn(false);
    let pid = c.id();
    let path = wait_for_segment(pid);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only segment");
    // A fresh publish (the child keeps allocating, so it answers the request).
    let before = live::read(pid).unwrap().publishes;
    let s = live::refresh(pid, Duration::from_secs(5), false).unwrap();
    assert!(s.publishes > before, "the child published again");
    assert_eq!(s.pid, pid);
    let row = s.cache(CACHE).expect("the cache in the live view");
    // The child's own figures; objects cached per CPU area may differ by one area's
    // cache: a sheaf pair (at most 128 objects each) and a slab.
    let slack = 2 * 128 + row.objperslab;
    assert!(own[0] >= HELD as u64, "child report {own:?}");
    assert!(
        row.active_objs.abs_diff(own[0]) <= slack,
        "live {row:?} vs own {own:?}"
    );
    assert!(row.num_objs.abs_diff(own[1]) <= slack, "{row:?} vs {own:?}");
    assert!(
        row.num_slabs.abs_diff(own[2]) <= slack.div_ceil(row.objperslab),
        "{row:?} vs {own:?}"
    );
    assert!(s.counters.allocated >= HELD * 200, "{:?}", s.counters);
    // The barns' spill, as the child saw it (no decay runs in the test's time).
    assert!(own[4] > 0, "the dropped table spilled: {own:?}");
    assert_eq!((s.spill_bytes, s.spill_limit), (own[4], own[5]));
    assert!(s.rss_bytes >= (HELD * 200) as u64);
    assert!(live::processes().iter().any(|p| p.pid == pid));
    // Killed: its segment stays, stale; the listing recognises and removes it.
    c.kill().unwrap();
    c.wait().unwrap();
    assert!(path.exists(), "a killed process cannot remove its segment");
    assert!(!live::processes().iter().any(|p| p.pid == pid));
    assert!(!path.exists(), "the stale segment was removed");
    // A normal exit removes its own.
    let (mut c, _, out) = spawn(true);
    let path = live::segment_file(c.id());
    let rest: Vec<String> = out.lines().map(Result::unwrap).collect();
    assert!(c.wait().unwrap().success(), "{rest:?}");
    assert!(!path.exists(), "removed at exit");
}

/// A process that ends within its first publishing interval makes no segment at
/// all: the view costs a short command nothing.
#[test]
fn a_process_shorter_than_the_interval_makes_no_segment() {
    if std::env::var_os(CHILD).is_some() {
        let held: Vec<Box<[u8; 100]>> = (0..5000).map(|_| Box::new([3u8; 100])).collect();
        for _ in 0..20 {
            churn();
        }
        std::hint::black_box(&held);
        let made = live::segment_file(std::process::id()).exists();
        println!("segment {made}");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_process_shorter_than_the_interval_makes_no_segment",
        ])
        .args(["--nocapture"])
        .env(CHILD, "1")
        .env("KMEM_LIVE", "60000")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("segment false"), "{text}");
}

/// Another user's file at the segment's path (made before the program started, for
/// a pid it guessed) is left alone: not sized, written, mapped or removed, and the
/// view stays off. Before, kmem took it over: that user could read the view, or
/// shrink the file under the mapping and crash the program at its next publish.
/// Needs root, to make a file another user owns.
#[test]
fn another_users_file_at_the_segment_path_is_left_alone() {
    if std::env::var_os(CHILD).is_some() {
        println!("pid {}", std::process::id());
        for _ in 0..100 {
            churn();
        }
        return;
    }
    // SAFETY: a plain system call.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making a file of another user needs root");
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "another_users_file_at_the_segment_path_is_left_alone",
        "--nocapture",
    ])
    .env(CHILD, "1")
    .env("KMEM_LIVE", "5");
    // SAFETY: the hook runs in the child between fork and exec and only makes
    // system calls on a path built on its stack (no allocation, no lock).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let mut path = *b"/dev/shm/kmem.\0\0\0\0\0\0\0\0\0\0\0\0";
            let mut pid = libc::getpid() as u32;
            let mut digits = [0u8; 10];
            let mut n = 0;
            loop {
                digits[n] = b'0' + (pid % 10) as u8;
                n += 1;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            for i in 0..n {
                path[14 + i] = digits[n - 1 - i];
            }
            let fd = libc::open(
                path.as_ptr().cast(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                0o666,
            );
            if fd < 0 || libc::fchown(fd, 65534, 65534) != 0 || libc::fchmod(fd, 0o666) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let path = live::segment_file(out_pid(&out));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(&path).expect("the other user's file is still there");
    std::fs::remove_file(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.len()), (65534, 0), "taken over");
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
}

/// The pid of a child that printed `pid N` (see the test's child).
fn out_pid(out: &std::process::Output) -> u32 {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("pid ")?.trim().parse().ok())
        .expect("the child's pid")
}
