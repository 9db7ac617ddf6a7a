//! Per-CPU rseq mode needs to pin a thread to another CPU now and then (a flush, a
//! drain or a destroy takes that CPU's freelist with a sequence run there). Where
//! pinning is refused (here a seccomp filter fails `sched_setaffinity` with EPERM,
//! as sandboxes do), the mode is not chosen: kmem says so and takes the next best.
//! Before, it was chosen, and a take of another CPU's freelist fell back to a plain
//! exchange that a section running on that CPU could race: an object lost or handed
//! out twice.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use kmem::config::PerCpuMode;
use kmem::platform::rseq::{self, OnCpu};
use std::process::Command;

#[global_allocator]
static A: kmem::KmemAlloc = kmem::KmemAlloc;

const CHILD: &str = "KMEM_TEST_RSEQ_PINNING_CHILD";

/// Makes `sched_setaffinity` fail with EPERM in this process and the programs it
/// runs (a seccomp filter; `no_new_privs` first, as an unprivileged filter needs).
fn refuse_pinning() -> std::io::Result<()> {
    let filter = [
        // Load the system call number (`seccomp_data.nr`).
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // sched_setaffinity: fall through to the refusal, else skip it.
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: libc::SYS_sched_setaffinity as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with a filter program that outlives the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[test]
fn cpu_rseq_mode_is_not_chosen_where_threads_cannot_be_pinned() {
    if std::env::var_os(CHILD).is_some() {
        let cpu = kmem::platform::linux::current_cpu();
        assert!(!rseq::can_pin(), "pinning refused");
        assert_eq!(rseq::on_cpu(cpu, || ()), OnCpu::Failed);
        assert_ne!(kmem::heap().percpu_mode(), PerCpuMode::CpuRseq);
        let v: Vec<u64> = (0..10_000).collect();
        assert_eq!(v.iter().sum::<u64>(), 49_995_000);
        kmem::platform::linux::rseq_init();
        let rseq = kmem::platform::linux::rseq_offset().is_some();
        println!("child done, rseq {rseq}");
        return;
    }
    // Without the filter: the thread's own CPU runs `f` pinned; a CPU outside its
    // affinity is not allowed.
    let cpu = kmem::platform::linux::current_cpu();
    assert_eq!(rseq::on_cpu(cpu, || 7), OnCpu::Ran(7));
    assert_eq!(
        rseq::on_cpu(libc::CPU_SETSIZE as usize, || 7),
        OnCpu::NotAllowed
    );
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "cpu_rseq_mode_is_not_chosen_where_threads_cannot_be_pinned",
        "--nocapture",
    ])
    .env(CHILD, "1")
    .env("KMEM_PERCPU", "cpu-rseq");
    // SAFETY: the hook only makes system calls (no allocation, no lock).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(refuse_pinning);
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("child done"), "{stdout}");
    // The reason given: pinning, where glibc registered rseq (else its absence).
    let reason = if stdout.contains("rseq true") {
        "KMEM_PERCPU=cpu-rseq: threads cannot be pinned to a CPU here"
    } else {
        "KMEM_PERCPU=cpu-rseq: no rseq registration here"
    };
    assert!(stderr.contains(reason), "{stdout}{stderr}");
}
