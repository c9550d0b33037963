//! Interest that callers hold outside an engine wait: the reference manager's
//! `beginHotWaitInterest` (a lease on hot keys and templates, M19, released by its caller) and
//! `heartbeatTemplates` (T8). A host that registers waits on a stream's journal itself (through
//! [`TouchEngine::journal`]) uses them to tell the processor what is being waited for, as the
//! reference's routes do; [`TouchEngine::wait`] takes and releases its own lease.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::hot::{hot_limits, HotLease, HotLimits, HotState, InterestMode};
use super::{wall_ms, TouchEngine};
use crate::error::{Error, Result};

/// One lease: the stream, what was registered and the limits it was registered under.
struct Lease {
    stream: String,
    lease: HotLease,
    limits: HotLimits,
}

/// The open leases of an engine, by id.
#[derive(Default)]
pub(crate) struct Leases {
    next: u64,
    open: HashMap<u64, Lease>,
}

impl TouchEngine {
    /// M19 *Begin* for a wait the caller runs itself: counts a fine or coarse waiter and makes
    /// the keys (a fine wait of at most 64 keys) and the 16-hex template ids hot, as the
    /// reference's `beginHotWaitInterest` does. Returns the lease's id for
    /// [`TouchEngine::release_hot_interest`]. The stream must have touch enabled.
    pub fn begin_hot_interest(
        &self,
        stream: &str,
        mode: InterestMode,
        key_ids: &[u32],
        template_ids: &[String],
    ) -> Result<u64> {
        self.check_open()?;
        let cfg = self.touch_config(stream)?;
        let limits = hot_limits(&cfg);
        let lease = {
            let mut st = self.inner.state.lock();
            let rt = st.streams.get_mut(stream).ok_or_else(|| Error::TouchNotEnabled("touch not enabled".into()))?;
            rt.hot.get_or_insert_with(HotState::default).begin(mode, key_ids, template_ids, &limits, wall_ms())
        };
        // Rows the loop left unprocessed while nobody listened are processed now.
        self.inner.poke_if_deferred(stream);
        let mut leases = self.inner.leases.lock();
        leases.next += 1;
        let id = leases.next;
        leases.open.insert(id, Lease { stream: stream.to_string(), lease, limits });
        Ok(id)
    }

    /// M19 *Release* of a lease from [`TouchEngine::begin_hot_interest`]: its keys and
    /// templates enter their grace period. Returns false for an id already released (a second
    /// release does nothing, as the reference's release function).
    pub fn release_hot_interest(&self, id: u64) -> bool {
        let Some(Lease { stream, lease, limits }) = self.inner.leases.lock().open.remove(&id) else {
            return false;
        };
        release_lease(&self.inner.state, &stream, &lease, &limits);
        true
    }

    /// T8: marks templates as used now (their inactivity TTL restarts) and writes last-seen
    /// times that are due, as the reference's `heartbeatTemplates`.
    pub fn heartbeat_templates(&self, stream: &str, template_ids: &[String]) -> Result<()> {
        self.check_open()?;
        let cfg = self.touch_config(stream)?;
        self.heartbeat(stream, &cfg, template_ids);
        Ok(())
    }
}

/// Releases `lease` on `stream`'s hot state and drops the state once it holds nothing.
pub(crate) fn release_lease(state: &Mutex<super::State>, stream: &str, lease: &HotLease, limits: &HotLimits) {
    let mut st = state.lock();
    if let Some(rt) = st.streams.get_mut(stream) {
        if let Some(h) = &mut rt.hot {
            let now = wall_ms();
            h.release(lease, limits, now);
            if !h.sweep(limits, now, true) {
                rt.hot = None;
            }
        }
    }
}

/// Whether `mode` is `"fine"` or `"coarse"`, as the reference route reads `interestMode`.
pub fn parse_interest_mode(mode: &str) -> Option<InterestMode> {
    match mode {
        "fine" => Some(InterestMode::Fine),
        "coarse" => Some(InterestMode::Coarse),
        _ => None,
    }
}
