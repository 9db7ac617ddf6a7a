//! Per-CPU rseq mode takes another CPU's freelists and sheaves now and then (a flush,
//! a drain or a destroy) with `membarrier`'s rseq fence, or, where the kernel refuses
//! it, by pinning the thread to that CPU for a sequence run there. Here a seccomp
//! filter refuses `sched_setaffinity` with EPERM, as sandboxes do: the mode is chosen
//! and takes with fences; with `membarrier` refused too, the mode is not chosen, and
//! kmem says so and takes the next best (a take of another CPU's word could otherwise
//! only wait for the scheduler to run the thread there, or race a section with a
//! plain exchange: an object lost or handed out twice).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use kmem::config::PerCpuMode;
use kmem::platform::rseq::{self, OnCpu};
use std::process::Command;

#[global_allocator]
static A: kmem::KmemAlloc = kmem::KmemAlloc;

mod common;

const CHILD: &str = "KMEM_TEST_RSEQ_PINNING_CHILD";

/// Makes the system calls `refused` fail with EPERM in this process and the programs
/// it runs (a seccomp filter; `no_new_privs` first, as an unprivileged filter needs).
/// Returns the hook to run in the child: it only makes system calls.
fn refuse(refused: &[libc::c_long]) -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    let n = refused.len() as u8;
    // Load the system call number (`seccomp_data.nr`); each refused number jumps to
    // the refusal (last), else on to the next test; past them all, allow.
    let mut filter = vec![libc::sock_filter {
        code: 0x20,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    for (i, &nr) in refused.iter().enumerate() {
        filter.push(libc::sock_filter {
            code: 0x15,
            jt: n - i as u8,
            jf: 0,
            k: nr as u32,
        });
    }
    filter.push(libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    });
    filter.push(libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    });
    move || {
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_mut_ptr(),
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
}

/// Runs test `name` of this binary in a child with `KMEM_PERCPU=cpu-rseq` and the
/// system calls `refused` refused; checks it succeeded and said "child done"; returns
/// its stdout and stderr.
fn run_refusing(name: &str, refused: &[libc::c_long]) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture"])
        .env(CHILD, "1")
        .env("KMEM_PERCPU", "cpu-rseq");
    // SAFETY: the hook only makes system calls (no allocation, no lock).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(refuse(refused));
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("child done"), "{stdout}");
    (stdout, stderr)
}

/// Where threads cannot be pinned but `membarrier`'s rseq fence is allowed, the mode
/// is chosen and takes another CPU's words with fences: two threads (left to the
/// scheduler, as they cannot be pinned) allocate and flush, and nothing is handed out
/// twice. Before the fence, a take there waited, yielding, for the scheduler to run
/// the thread on that CPU.
#[test]
fn cpu_rseq_takes_with_fences_where_threads_cannot_be_pinned() {
    let name = "cpu_rseq_takes_with_fences_where_threads_cannot_be_pinned";
    if std::env::var_os(CHILD).is_some() {
        let cpu = kmem::platform::linux::current_cpu();
        assert!(!rseq::can_pin(), "pinning refused");
        assert_eq!(rseq::on_cpu(cpu, || ()), OnCpu::Failed);
        kmem::platform::linux::rseq_init();
        if kmem::platform::linux::rseq_offset().is_none() {
            println!("child done, no rseq");
            return;
        }
        if !rseq::can_fence() {
            // A kernel before 5.10, or a policy that refuses `membarrier`: the other
            // test's case.
            assert_ne!(kmem::heap().percpu_mode(), PerCpuMode::CpuRseq);
            println!("child done, no fence");
            return;
        }
        assert_eq!(kmem::heap().percpu_mode(), PerCpuMode::CpuRseq);
        let fences = common::takes_under_load(64, 100_000);
        println!("child done, {fences:?} fences");
        return;
    }
    let (stdout, stderr) = run_refusing(name, &[libc::SYS_sched_setaffinity]);
    // Without rseq or the fence, kmem said why it took another mode: the other test's.
    if !stdout.contains("no fence") && !stdout.contains("no rseq") {
        assert!(!stderr.contains("KMEM_PERCPU=cpu-rseq"), "{stdout}{stderr}");
    }
    assert!(
        stdout.contains("fences") || stdout.contains("no rseq") || stdout.contains("no fence"),
        "{stdout}"
    );
}

/// Where neither the fence nor pinning is allowed, the mode is not chosen: kmem says
/// why and takes the next best.
#[test]
fn cpu_rseq_mode_is_not_chosen_where_threads_cannot_be_pinned() {
    let name = "cpu_rseq_mode_is_not_chosen_where_threads_cannot_be_pinned";
    if std::env::var_os(CHILD).is_some() {
        let cpu = kmem::platform::linux::current_cpu();
        assert!(!rseq::can_pin(), "pinning refused");
        assert!(!rseq::can_fence(), "the fence refused");
        assert_eq!(rseq::on_cpu(cpu, || ()), OnCpu::Failed);
        assert_ne!(kmem::heap().percpu_mode(), PerCpuMode::CpuRseq);
        let v: Vec<u64> = (0..10_000).collect();
        assert_eq!(v.iter().sum::<u64>(), 49_995_000);
        kmem::platform::linux::rseq_init();
        let rseq = kmem::platform::linux::rseq_offset().is_some();
        println!("child done, rseq {rseq}");
        return;
    }
    // Without the filter: the thread's own CPU runs `f` pinned; a CPU past any set is
    // not allowed.
    let cpu = kmem::platform::linux::current_cpu();
    assert_eq!(rseq::on_cpu(cpu, || 7), OnCpu::Ran(7));
    assert_eq!(
        rseq::on_cpu(libc::CPU_SETSIZE as usize, || 7),
        OnCpu::NotAllowed
    );
    let (stdout, stderr) = run_refusing(name, &[libc::SYS_sched_setaffinity, libc::SYS_membarrier]);
    // The reason given: the fence and pinning, where glibc registered rseq (else its
    // absence).
    let reason = if stdout.contains("rseq true") {
        "KMEM_PERCPU=cpu-rseq: no membarrier rseq fence here, and threads cannot be pinned"
    } else {
        "KMEM_PERCPU=cpu-rseq: no rseq registration here"
    };
    assert!(stderr.contains(reason), "{stdout}{stderr}");
}
