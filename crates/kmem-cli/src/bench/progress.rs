//! The progress bar on stderr (indicatif): a step per finished measurement and the
//! name of what runs now. It stays hidden for the first second, so a short run
//! prints nothing on stderr, and indicatif draws only on a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

/// A handle on the run's progress bar (clones share the bar).
#[derive(Clone)]
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar of `total` steps, drawn on stderr once the run has taken a second.
    pub fn start(total: u64) -> Self {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_draw_target(ProgressDrawTarget::hidden());
        let started = Instant::now();
        let late = bar.clone();
        // Detached: it only ever shows the bar, and the bar may be finished by then.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            if !late.is_finished() && started.elapsed() >= Duration::from_secs(1) {
                late.set_draw_target(ProgressDrawTarget::stderr());
            }
        });
        Progress(bar)
    }

    /// A bar that never shows.
    pub fn hidden() -> Self {
        Progress(ProgressBar::hidden())
    }

    /// Counts one finished step.
    pub fn tick(&self) {
        self.0.inc(1);
    }

    /// Sets the message (what runs now).
    pub fn status(&self, msg: String) {
        self.0.set_message(msg);
    }

    /// Clears the bar from the terminal; later steps are not drawn.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_bar() {
        let p = Progress::start(3);
        let q = p.clone();
        p.tick();
        q.tick();
        assert_eq!(p.0.position(), 2);
        q.status("page".into());
        assert_eq!(p.0.message(), "page");
        p.finish();
        assert!(q.0.is_finished());
    }
}
