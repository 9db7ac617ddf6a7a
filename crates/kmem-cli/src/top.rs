//! `kmem top [PID]`: the live view of a process running on kmem (see `kmem::live`),
//! slabtop-style. Without a PID it lists the processes whose view this user can read
//! (removing the stale views of processes that are gone). `--once` prints one text
//! snapshot, `--json` one JSON document, `--sites [CACHE]` the allocation sites
//! (`alloc_calls`, or `free_calls` with `--free`) of caches with slub_debug tracks.

use kmem::live::{self, Snapshot};
use kmem::sites::{Calls, Location};
use kmem::stats::CacheStats;
use kmem::symbolize::Symbolizer;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// `kmem top`'s options.
#[derive(clap::Args, Debug)]
pub struct TopOptions {
    /// The process to show; without it, the processes on kmem this user can see.
    pub pid: Option<u32>,
    /// Print one snapshot and exit (no screen refresh).
    #[arg(long)]
    pub once: bool,
    /// Print one JSON document and exit.
    #[arg(long)]
    pub json: bool,
    /// Show allocation sites (caches with KMEM_DEBUG=U), of every tracking cache or of
    /// the one named.
    #[arg(long, value_name = "CACHE", num_args = 0..=1, default_missing_value = "")]
    pub sites: Option<String>,
    /// With --sites: where the objects' slots were last freed (free_calls).
    #[arg(long)]
    pub free: bool,
    /// Seconds between refreshes (at least 0.1, at most a day).
    #[arg(long, default_value_t = 1.0, value_parser = parse_delay)]
    pub delay: f64,
    /// Caches shown (largest first).
    #[arg(long, default_value_t = 30)]
    pub limit: usize,
}

/// `--delay`: a number of seconds a `Duration` can hold and a refresh makes sense at;
/// `inf`, `nan` or `1e300` are refused with a message instead of a panic.
fn parse_delay(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(0.1..=86_400.0).contains(&v) {
        return Err(format!("{s}: seconds from 0.1 to 86400"));
    }
    Ok(v)
}

/// Runs `kmem top`.
pub fn top(o: &TopOptions) -> ExitCode {
    match run(o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kmem top: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(o: &TopOptions) -> Result<(), String> {
    let Some(pid) = o.pid else {
        return list(o.json);
    };
    let fetch = |sites: bool| {
        let wait = Duration::from_millis(if sites { 1000 } else { 300 });
        live::refresh(pid, wait, sites).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("no live view for pid {pid} (not running on kmem, KMEM_LIVE=off, or gone)")
            } else {
                format!("pid {pid}: {e}")
            }
        })
    };
    if let Some(cache) = &o.sites {
        let s = fetch(true)?;
        let which = if o.free { Calls::Free } else { Calls::Alloc };
        let cache = (!cache.is_empty()).then_some(cache.as_str());
        let text = sites_text(&s, which, cache, o.json)?;
        print!("{text}");
        return Ok(());
    }
    if o.json {
        let s = fetch(false)?;
        println!(
            "{}",
            serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if o.once {
        print!("{}", screen(&fetch(false)?, o.limit));
        return Ok(());
    }
    let delay = Duration::from_secs_f64(o.delay.max(0.1));
    loop {
        let s = match fetch(false) {
            Ok(s) => s,
            Err(e) if live::segment_file(pid).exists() => return Err(e),
            Err(_) => {
                println!("\nkmem top: pid {pid} has exited");
                return Ok(());
            }
        };
        // Clear the screen, cursor home.
        print!("\x1b[H\x1b[2J{}", screen(&s, o.limit));
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::thread::sleep(delay);
    }
}

fn list(json: bool) -> Result<(), String> {
    let procs = live::processes();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&procs).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if procs.is_empty() {
        println!("no process on kmem with a live view that this user can read");
        return Ok(());
    }
    println!(
        "{:>8}  {:<16} {:>10} {:>10} {:>10}",
        "PID", "COMMAND", "RSS", "ALLOCATED", "UPDATED"
    );
    for p in procs {
        println!(
            "{:>8}  {:<16} {:>10} {:>10} {:>8}ms",
            p.pid,
            p.comm,
            human(p.rss_bytes),
            human(p.allocated_bytes),
            p.age_ms
        );
    }
    Ok(())
}

/// Bytes in a page of the heap.
const PAGE_BYTES: u64 = kmem::PAGE_SIZE as u64;

/// Bytes as `12.3M`.
fn human(b: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", units[u])
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

/// The slabtop-style screen.
pub fn screen(s: &Snapshot, limit: usize) -> String {
    let mut w = String::new();
    let c = &s.counters;
    let _ = writeln!(
        w,
        "kmem top - pid {} ({}), {} mode, {} design; published {} ms ago (every {} ms at most)",
        s.pid,
        s.comm,
        s.mode,
        s.slub,
        s.age_ms(),
        s.interval_ms
    );
    let _ = writeln!(
        w,
        " Memory: RSS {}, allocated {}, active {}, resident {}, metadata {}, given back {}, mapped {}",
        human(s.rss_bytes),
        human(c.allocated as u64),
        human(c.active as u64),
        human(c.resident as u64),
        human(c.metadata as u64),
        human(c.retained as u64),
        human(c.mapped as u64)
    );
    for z in &s.zones {
        let used = z.managed_pages.saturating_sub(z.free_pages);
        let _ = writeln!(
            w,
            " Pages: node {} {}: {} used, {} free ({} given back), {} on per-CPU lists; buddyinfo {}",
            z.node,
            z.name,
            used,
            z.free_pages,
            z.reported_pages,
            z.pcp_pages,
            z.buddyinfo
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let _ = writeln!(
        w,
        " Huge mappings: {} live ({}), {} cached for reuse",
        s.huge_live,
        human(s.huge_bytes),
        human(s.huge_cached_bytes)
    );
    let _ = writeln!(
        w,
        " Barns past their bounds: {} of {} (free small objects kept in whole sheaves for reuse)",
        human(s.spill_bytes),
        human(s.spill_limit)
    );
    if s.bound_pages > 0 {
        let _ = writeln!(
            w,
            " Bound (KMEM_MAX): {}, {} counted: {} held by huge mappings, {} of the page allocator's free pages lent to them",
            human(s.bound_pages * PAGE_BYTES),
            human(s.bound_counted_pages * PAGE_BYTES),
            human(s.bound_outside_pages * PAGE_BYTES),
            human(s.bound_lent_pages * PAGE_BYTES)
        );
    }
    let objs: u64 = s.caches.iter().map(|c| c.num_objs).sum();
    let active: u64 = s.caches.iter().map(|c| c.active_objs).sum();
    let slabs: u64 = s.caches.iter().map(|c| c.num_slabs).sum();
    let bytes: u64 = s.caches.iter().map(CacheStats::bytes).sum();
    let active_bytes: u64 = s.caches.iter().map(|c| c.active_objs * c.objsize).sum();
    let used_caches = s.caches.iter().filter(|c| c.num_slabs > 0).count() as u64;
    let _ = writeln!(
        w,
        " Active / Total Objects (% used)    : {active} / {objs} ({:.1}%)",
        pct(active, objs)
    );
    let _ = writeln!(
        w,
        " Active / Total Slabs (% used)      : {slabs} / {slabs} (100.0%)"
    );
    let _ = writeln!(
        w,
        " Active / Total Caches (% used)     : {used_caches} / {} ({:.1}%)",
        s.caches.len(),
        pct(used_caches, s.caches.len() as u64)
    );
    let _ = writeln!(
        w,
        " Active / Total Size (% used)       : {:.2}K / {:.2}K ({:.1}%)",
        active_bytes as f64 / 1024.0,
        bytes as f64 / 1024.0,
        pct(active_bytes, bytes)
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "  OBJS ACTIVE  USE OBJ SIZE  SLABS OBJ/SLAB CACHE SIZE NAME"
    );
    let mut rows: Vec<&CacheStats> = s.caches.iter().filter(|c| c.num_slabs > 0).collect();
    rows.sort_by_key(|c| (std::cmp::Reverse(c.bytes()), c.name.clone()));
    for c in rows.iter().take(limit) {
        let _ = writeln!(
            w,
            "{:6} {:6} {:3.0}% {:7.2}K {:6} {:8} {:9}K {}",
            c.num_objs,
            c.active_objs,
            pct(c.active_objs, c.num_objs),
            c.objsize as f64 / 1024.0,
            c.num_slabs,
            c.objperslab,
            c.bytes() / 1024,
            c.name
        );
    }
    if s.tracking > 0 {
        let _ = writeln!(
            w,
            "\n {} caches keep allocation tracks (KMEM_DEBUG=U): kmem top {} --sites",
            s.tracking, s.pid
        );
    }
    if s.truncated {
        let _ = writeln!(
            w,
            "\n (the view ran out of room: the records after the last one shown are left out)"
        );
    }
    w
}

/// One site of `--sites` output: merged over caches unless one is named.
#[derive(serde::Serialize)]
struct SiteRow {
    cache: Option<String>,
    symbol: String,
    stack: Vec<String>,
    #[serde(flatten)]
    location: Location,
}

/// The `alloc_calls` / `free_calls` report of a snapshot.
fn sites_text(
    s: &Snapshot,
    which: Calls,
    cache: Option<&str>,
    json: bool,
) -> Result<String, String> {
    let mut merged: BTreeMap<usize, Location> = BTreeMap::new();
    let mut any_cache = false;
    for site in s.sites.iter().filter(|x| x.calls == which) {
        if cache.is_some_and(|c| c != site.cache) {
            continue;
        }
        any_cache = true;
        merged
            .entry(site.location.addr)
            .and_modify(|l| l.merge(&site.location))
            .or_insert(site.location);
    }
    if s.sites_published_unix_ns == 0 && s.tracking > 0 {
        return Err(format!(
            "pid {}: no allocation sites published yet (a process publishes from its allocation slow paths: it may be idle)",
            s.pid
        ));
    }
    if !any_cache {
        return Err(match cache {
            Some(c) if s.cache(c).is_none() => format!("pid {}: no cache named {c}", s.pid),
            Some(c) => format!(
                "pid {}: no objects in use with tracks in {c} (tracks need KMEM_DEBUG=U for it)",
                s.pid
            ),
            None => format!(
                "pid {}: no objects in use with tracks (run it with KMEM_DEBUG=U, or `kmem run --debug=U`)",
                s.pid
            ),
        });
    }
    let mut rows: Vec<Location> = merged.into_values().collect();
    rows.sort_by_key(|l| (std::cmp::Reverse(l.count), l.addr));
    // The target may be a C++ program: its names demangle through a C++ runtime,
    // which this process loads if it can (without one they stay mangled).
    kmem::symbolize::load_cxx_runtime();
    let mut sym = Symbolizer::for_pid(s.pid).ok();
    let mut name = |a: usize| match sym.as_mut() {
        Some(y) => y.symbolize(a),
        None => format!("0x{a:x}"),
    };
    if json {
        let out: Vec<SiteRow> = rows
            .iter()
            .map(|l| SiteRow {
                cache: cache.map(str::to_string),
                symbol: if l.addr == 0 {
                    "<not-available>".into()
                } else {
                    name(l.addr)
                },
                stack: l
                    .stack
                    .iter()
                    .filter(|&&a| a != 0)
                    .map(|&a| name(a))
                    .collect(),
                location: *l,
            })
            .collect();
        return serde_json::to_string_pretty(&out)
            .map(|t| t + "\n")
            .map_err(|e| e.to_string());
    }
    let mut w = String::new();
    let _ = writeln!(
        w,
        "{} of pid {} ({}), {}; walked {} ms ago",
        match which {
            Calls::Alloc => "alloc_calls",
            Calls::Free => "free_calls",
        },
        s.pid,
        s.comm,
        cache.map_or("all tracking caches".to_string(), |c| format!("cache {c}")),
        s.sites_age_ms().unwrap_or(0)
    );
    for l in &rows {
        let _ = l.write(&mut w, &mut |a, w| w.write_str(&name(a)));
        let _ = writeln!(w);
    }
    if s.sites_dropped > 0 {
        let _ = writeln!(
            w,
            "({} objects at sites beyond the table's room)",
            s.sites_dropped
        );
    }
    if s.truncated {
        let _ = writeln!(
            w,
            "(the view ran out of room: the rest of its records are left out)"
        );
    }
    Ok(w)
}
