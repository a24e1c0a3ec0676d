//! The progress bar of a transfer on standard error, drawn from its [`Progress`] by a thread of
//! its own: nothing until bytes move, then bytes, rate and time, and a bar with an estimate
//! once the size is known.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::Progress;

/// What the progress bar shows for a transfer's `total` (0: not known yet, `u64::MAX`: no
/// size, standard input) and the bytes `done` in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarPhase {
    /// Nothing has moved (no sender yet, or the hello still in flight): no bar at all.
    Waiting,
    /// Bytes, rate and time, no size to measure them against.
    Counting,
    /// A bar against the size, with an estimate.
    Sized,
}

impl BarPhase {
    pub fn of(total: u64, done: u64) -> Self {
        match (total, done) {
            (_, 0) => BarPhase::Waiting,
            (0 | u64::MAX, _) => BarPhase::Counting,
            _ => BarPhase::Sized,
        }
    }
}

/// A bar drawn from a [`Progress`] until [`finish`](Self::finish) (or drop).
#[derive(Debug)]
pub struct BarThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BarThread {
    /// Starts the bar, `label` before it (`sending`); hidden when `quiet` or when stderr is no
    /// terminal.
    pub fn start(progress: Arc<Progress>, quiet: bool, label: &'static str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        // A refused thread only costs the bar.
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                if !quiet && std::io::stderr().is_terminal() {
                    draw(&progress, &s, label);
                }
            })
            .ok();
        Self { stop, thread }
    }

    /// Stops the bar and clears it.
    pub fn finish(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BarThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn draw(progress: &Progress, stop: &AtomicBool, label: &'static str) {
    // Created once bytes move: a receiver's bar would count seconds with no sender, its rate
    // diluted by them, and a sender's would read `eta 0s` first.
    let mut pb: Option<ProgressBar> = None;
    let mut held = 0;
    while !stop.load(Ordering::Relaxed) {
        let (total, done) = (progress.total(), progress.done());
        let phase = BarPhase::of(total, done);
        if phase == BarPhase::Waiting {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let bar = pb.get_or_insert_with(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>9} {bytes} ({binary_bytes_per_sec}, {elapsed}){msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_prefix(label);
            b
        });
        // The bar covers what travels in this run only: the rate and the estimate are over
        // bytes sent, and what the receiver holds is shown beside them.
        if progress.held() != held {
            held = progress.held();
            bar.set_message(format!(" (+{} held, not sent)", HumanBytes(held)));
        }
        if phase == BarPhase::Sized && bar.length().is_none() {
            bar.set_length(total.saturating_sub(held));
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:>9} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} \
                     eta {eta}{msg}",
                )
                .map(|st| st.progress_chars("=> "))
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
        } else if phase == BarPhase::Sized {
            bar.set_length(total.saturating_sub(held));
        }
        bar.set_position(done);
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some(bar) = pb {
        bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_waits_for_bytes_and_sizes_itself_once_known() {
        assert_eq!(BarPhase::of(0, 0), BarPhase::Waiting);
        assert_eq!(BarPhase::of(5 << 20, 0), BarPhase::Waiting);
        assert_eq!(BarPhase::of(u64::MAX, 1), BarPhase::Counting);
        assert_eq!(BarPhase::of(0, 7), BarPhase::Counting);
        assert_eq!(BarPhase::of(5 << 20, 1), BarPhase::Sized);
    }

    #[test]
    fn a_hidden_bar_stops_at_once() {
        let bar = BarThread::start(Arc::new(Progress::default()), true, "sending");
        bar.finish();
    }
}
