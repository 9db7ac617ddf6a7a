//! `kmem`: benchmarks kmem against peer allocators in one process and one run.
//!
//! `kmem bench [SUITE…] [--quick] [--json] [--plot DIR]` — with no suite, every suite
//! in quick form; readable tables, or with `--json` one JSON document (its fields:
//! `bench::record`). `kmem run [OPTIONS] -- CMD…` runs a program on libkmem.so;
//! `kmem top [PID]` shows a running program's heap (its live view).

mod bench;
mod run;
mod top;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kmem",
    version,
    about = "The kernel's memory-allocation stack, in Rust: benchmarks and tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program with libkmem.so preloaded (kmem as its malloc); each option sets
    /// the KMEM_* variable named in its help, checked before the program starts.
    Run {
        #[command(flatten)]
        opts: run::RunOptions,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Show the live heap of a process running on kmem, slabtop-style (refreshing
    /// every second); without PID, list the processes on kmem.
    Top {
        #[command(flatten)]
        opts: top::TopOptions,
    },
    /// Run benchmark suites (all of them, quick, when none is named).
    Bench {
        /// Suites to run: page, slab, cache, debug, memcg, percpu, percpu_memory,
        /// slabinfo, global, workloads, preload.
        suites: Vec<String>,
        /// Shorten every suite to a few seconds.
        #[arg(long)]
        quick: bool,
        /// Print one JSON document on stdout instead of tables.
        #[arg(long)]
        json: bool,
        /// Write one SVG chart per suite into this directory.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
    },
    /// A benchmark child: measures kmem in this process's configuration
    /// (`KMEM_PERCPU`, `KMEM_SLUB`) and prints JSON rows.
    #[command(hide = true)]
    BenchChild {
        /// `times`, `held` (the `percpu` suites), `workloads`, `cache` or `slab`.
        what: String,
        #[arg(long)]
        quick: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Bench {
        suites: Vec::new(),
        quick: true,
        json: false,
        plot: None,
    });
    match command {
        Command::Run { opts, cmd } => run::run(&opts, &cmd),
        Command::Top { opts } => top::top(&opts),
        Command::BenchChild { what, quick } => match bench::child::child_main(&what, quick) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kmem bench-child: {e}");
                ExitCode::from(2)
            }
        },
        Command::Bench {
            suites,
            quick,
            json,
            plot,
        } => {
            // No suite named: everything, in quick form.
            let quick = quick || suites.is_empty();
            match bench::run(&suites, quick, json, plot.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kmem bench: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
