//! What a node counts: requests by RPC, refusals by kind (with the last few in detail, for
//! operators), and the upgrade notices `PollUpgrades` serves.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::owner::UpgradeNotice;
use crate::pb;

/// The RPCs that are counted.
#[derive(Clone, Copy, Debug)]
pub(super) enum Rpc {
    Export,
    Invoke,
    Revoke,
    Renew,
    DeriveGuard,
    BroadcastIssue,
    BroadcastRevoke,
    BroadcastCheck,
    Broadcast,
}

pub(super) const RPCS: [(Rpc, &str); 9] = [
    (Rpc::Export, "export"),
    (Rpc::Invoke, "invoke"),
    (Rpc::Revoke, "revoke"),
    (Rpc::Renew, "renew"),
    (Rpc::DeriveGuard, "derive_guard"),
    (Rpc::BroadcastIssue, "broadcast_issue"),
    (Rpc::BroadcastRevoke, "broadcast_revoke"),
    (Rpc::BroadcastCheck, "broadcast_check"),
    (Rpc::Broadcast, "broadcast"),
];

/// Requests this node sent to peers and their replies. Requests received are counted once,
/// by the metrics (`Metrics::received_count`), and read from there.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests_sent: AtomicU64,
    pub(super) replies_received: AtomicU64,
}

impl Counters {
    /// The counters message, with the received requests per RPC from `received`.
    pub(super) fn to_pb(&self, received: impl Fn(Rpc) -> u64) -> pb::Counters {
        let mut by_rpc = HashMap::new();
        let mut total = 0u64;
        for (rpc, name) in RPCS {
            let n = received(rpc);
            total = total.saturating_add(n);
            by_rpc.insert(name.to_owned(), n);
        }
        pb::Counters {
            requests_received: total,
            requests_sent: self.requests_sent.load(Ordering::Relaxed),
            replies_received: self.replies_received.load(Ordering::Relaxed),
            received_by_rpc: by_rpc,
        }
    }
}

/// How many refusals `Status` shows in detail.
pub(super) const RECENT_REFUSALS: usize = 64;

/// Refusals by detailed kind, and the most recent ones in detail.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    pub(super) by_kind: HashMap<&'static str, u64>,
    pub(super) recent: VecDeque<pb::Refusal>,
}

impl Refusals {
    pub(super) fn record(&mut self, refusal: pb::Refusal, kind: &'static str) {
        *self.by_kind.entry(kind).or_default() += 1;
        if self.recent.len() >= RECENT_REFUSALS {
            self.recent.pop_front();
        }
        self.recent.push_back(refusal);
    }
}

/// The published upgrade notices, bounded.
#[derive(Debug)]
pub(super) struct Notices {
    pub(super) kept: VecDeque<(u64, Vec<u8>)>,
    pub(super) latest: u64,
    pub(super) capacity: usize,
}

impl Notices {
    pub(super) fn new(capacity: usize) -> Self {
        Notices {
            kept: VecDeque::new(),
            latest: 0,
            capacity: capacity.max(1),
        }
    }

    pub(super) fn push(&mut self, notice: &UpgradeNotice) {
        self.latest = self.latest.saturating_add(1);
        if self.kept.len() >= self.capacity {
            self.kept.pop_front();
        }
        self.kept.push_back((self.latest, notice.encode()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn rpc_counters_are_indexed_in_table_order() {
        for (i, (rpc, _)) in RPCS.iter().enumerate() {
            assert_eq!(*rpc as usize, i);
        }
    }
}

/// Refusal lines logged per second at most: a prober cannot flood the log. Every refusal is
/// still counted (Status, metrics); how many lines were left out is said in one line before
/// the next refusal that is logged.
pub(super) const REFUSAL_LINES_PER_SECOND: u32 = 100;

/// Which refusals get a log line (see [`REFUSAL_LINES_PER_SECOND`]).
#[derive(Debug, Default)]
pub(super) struct LogLimit {
    /// The second the count is for (since the epoch).
    second: AtomicU64,
    /// Lines logged in that second.
    lines: std::sync::atomic::AtomicU32,
    /// Lines not logged since the last summary.
    suppressed: AtomicU64,
}

/// What to do with a refusal's log line.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum LogLine {
    /// Log it; first say how many were left out before it (if any).
    Log { left_out: u64 },
    /// Leave it out.
    Skip,
}

impl LogLimit {
    /// Whether the refusal at `second` gets its line.
    pub(super) fn line(&self, second: u64) -> LogLine {
        let current = self.second.load(Ordering::Relaxed);
        if second > current
            && self
                .second
                .compare_exchange(current, second, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.lines.store(0, Ordering::Relaxed);
        }
        if self.lines.fetch_add(1, Ordering::Relaxed) < REFUSAL_LINES_PER_SECOND {
            LogLine::Log {
                left_out: self.suppressed.swap(0, Ordering::Relaxed),
            }
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            LogLine::Skip
        }
    }
}

#[cfg(test)]
mod log_limit_tests {
    use super::*;

    #[test]
    fn past_the_limit_lines_are_left_out_and_then_counted() {
        let limit = LogLimit::default();
        for _ in 0..REFUSAL_LINES_PER_SECOND {
            assert_eq!(limit.line(10), LogLine::Log { left_out: 0 });
        }
        for _ in 0..5 {
            assert_eq!(limit.line(10), LogLine::Skip);
        }
        // The next second: logged again, with the five left out.
        assert_eq!(limit.line(11), LogLine::Log { left_out: 5 });
        assert_eq!(limit.line(11), LogLine::Log { left_out: 0 });
        // A clock that steps back stays in the current window.
        assert_eq!(limit.line(3), LogLine::Log { left_out: 0 });
    }
}
