//! One writer per prefix: who may publish, decided from what the writer's JetStream stream
//! holds (pure; [`super::link`] fetches the facts and publishes).
//!
//! A writer *claims* the prefix by publishing a [`Claim`] on `<prefix>.writer`, in the same
//! stream as its messages, with `Nats-Expected-Last-Subject-Sequence` set to the last claim it
//! saw: of two writers that claim at once, the broker stores one claim and refuses the other.
//! The stored claim's stream sequence is the writer's *lease*; every message it publishes
//! carries it ([`super::wire::envelope`]). A later claim always has a higher sequence, so
//! edges drop messages under a lease below the highest they have seen: a deposed writer (one
//! that was paused past its lease, then woke) cannot reach them, and it stands by once it sees
//! the newer claim.
//!
//! A writer that does not hold the prefix takes it when the stream shows it free: empty, its
//! last claim released (a clean close) or its own, or silent for three of the holder's beats
//! (at least a second; a holder beats every `beat_ms`). Until it decides, it *seeks*: its
//! messages wait, so a writer restarted at once after a crash loses nothing while it waits out
//! its dead self's lease. Once it sees another writer publishing, it *stands by* and its
//! messages are dropped.

use std::time::{Duration, Instant};

use super::wire::Claim;

/// What the writer's stream shows, fetched at each look.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The stream's last sequence (0: empty).
    pub last_seq: u64,
    /// How long ago the stream's last message was stored, by the broker's clock against
    /// ours; `None` when unknown or empty.
    pub last_age: Option<Duration>,
    /// The last claim in the stream, with its sequence.
    pub claim: Option<(u64, Claim)>,
}

/// Where a writer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Deciding (starting, or taking the prefix): messages wait.
    Seeking,
    /// Publishing under the claim at this stream sequence.
    Held(u64),
    /// Another writer publishes: messages are dropped.
    StandingBy,
}

/// What the link does after a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Publish our claim, expecting the claim subject's last sequence to be this (0: none).
    Claim {
        expect: u64,
    },
    /// Drop what waits: another writer holds the prefix.
    StandBy,
}

/// A writer's view of its prefix.
pub struct Lease {
    mine: Claim,
    state: State,
    /// The stream's last sequence when last looked at, and when it last moved.
    seen: Option<(u64, Instant)>,
    /// The claim of the writer this one stands by for, when the stream still holds it.
    pub held_by: Option<Claim>,
    /// It stood by since it last held the prefix.
    stood_by: bool,
}

/// The silence after which a holder beating every `beat_ms` is taken to be gone.
pub fn lapse(beat_ms: u32) -> Duration {
    Duration::from_millis((beat_ms as u64 * 3).max(1_000))
}

impl Lease {
    pub fn new(mine: Claim) -> Lease {
        Lease { mine, state: State::Seeking, seen: None, held_by: None, stood_by: false }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn mine(&self) -> &Claim {
        &self.mine
    }

    /// Decides from a look at the stream at `now`.
    pub fn observe(&mut self, f: &Facts, now: Instant) -> Step {
        let claim_seq = f.claim.as_ref().map_or(0, |(s, _)| *s);
        if let State::Held(lease) = self.state {
            return match &f.claim {
                Some((seq, _)) if *seq == lease => Step::Nothing,
                Some((seq, c)) if *seq > lease && c.writer != self.mine.writer => {
                    self.stand_by(Some(c.clone()), f, now);
                    Step::StandBy
                }
                // Another writer's claim below our lease: the stream was made anew (the broker
                // lost its store) and it claimed there first. Decide as a writer starting.
                Some((_, c)) if c.writer != self.mine.writer => {
                    self.state = State::Seeking;
                    self.seen = None;
                    self.observe(f, now)
                }
                // Our claim is gone: aged out of the stream (claimed again, so a writer that
                // starts sees who holds the prefix), or the stream was made anew.
                _ => self.seek(claim_seq),
            };
        }
        let moved = self.seen.is_none_or(|(s, _)| s != f.last_seq);
        let first = self.seen.is_none();
        if moved {
            self.seen = Some((f.last_seq, now));
        }
        let quiet_for = self.seen.map_or(Duration::ZERO, |(_, at)| now.duration_since(at));
        let holder = f.claim.as_ref().map(|(_, c)| c);
        let lapse = lapse(holder.map_or(self.mine.beat_ms, |c| c.beat_ms));
        let free = (f.last_seq == 0 && f.claim.is_none())
            || holder.is_some_and(|c| c.released || c.writer == self.mine.writer)
            || (!moved && quiet_for >= lapse)
            || (first && f.last_age.is_some_and(|age| age >= lapse));
        if free {
            return self.seek(claim_seq);
        }
        match self.state {
            // The holder publishes: stand by for it.
            State::Seeking if moved && !first => {
                self.stand_by(holder.cloned(), f, now);
                Step::StandBy
            }
            State::StandingBy if holder.is_some() => {
                self.held_by = holder.cloned();
                Step::Nothing
            }
            _ => Step::Nothing,
        }
    }

    fn seek(&mut self, expect: u64) -> Step {
        self.state = State::Seeking;
        Step::Claim { expect }
    }

    fn stand_by(&mut self, holder: Option<Claim>, f: &Facts, now: Instant) {
        self.state = State::StandingBy;
        self.stood_by = true;
        self.held_by = holder;
        self.seen = Some((f.last_seq, now));
    }

    /// Our claim was stored at `seq`: we publish under it. Returns whether we stood by before
    /// (the engine's next beat then carries everything).
    pub fn claimed(&mut self, seq: u64) -> bool {
        self.held_by = None;
        self.state = State::Held(seq);
        std::mem::take(&mut self.stood_by)
    }

    /// Our claim was refused: another writer's went in first. We look again.
    pub fn refused(&mut self) {
        self.state = State::Seeking;
        self.seen = None;
    }

    /// A publish under our lease failed for a reason other than the lease: look again.
    pub fn unsure(&mut self) {
        if let State::Held(_) = self.state {
            self.state = State::Seeking;
            self.seen = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(writer: u64) -> Claim {
        Claim { writer, started_at_ms: 0, beat_ms: 100, writer_url: format!("http://w{writer}"), released: false }
    }

    fn facts(last_seq: u64, claim: Option<(u64, Claim)>) -> Facts {
        Facts { last_seq, last_age: Some(Duration::ZERO), claim }
    }

    #[test]
    fn an_empty_stream_is_free_and_a_refused_claim_looks_again() {
        let t0 = Instant::now();
        let mut l = Lease::new(claim(1));
        assert_eq!(l.observe(&Facts::default(), t0), Step::Claim { expect: 0 });
        l.refused();
        // The other writer's claim and first messages: not free yet, then it publishes.
        assert_eq!(l.observe(&facts(2, Some((1, claim(2)))), t0), Step::Nothing);
        assert_eq!(l.state(), State::Seeking);
        assert_eq!(l.observe(&facts(3, Some((1, claim(2)))), t0 + Duration::from_millis(100)), Step::StandBy);
        assert_eq!(l.held_by.as_ref().map(|c| c.writer), Some(2));
    }

    #[test]
    fn a_standby_takes_over_after_three_beats_of_silence_and_at_once_on_a_release() {
        let t0 = Instant::now();
        let mut l = Lease::new(claim(1));
        let held = Some((5, claim(2)));
        l.observe(&facts(9, held.clone()), t0);
        assert_eq!(l.observe(&facts(10, held.clone()), t0), Step::StandBy);
        // The holder beats every 100 ms: a lapse is a second (the floor).
        assert_eq!(l.observe(&facts(10, held.clone()), t0 + Duration::from_millis(999)), Step::Nothing);
        assert_eq!(l.observe(&facts(11, held.clone()), t0 + Duration::from_millis(1_500)), Step::Nothing);
        assert_eq!(l.observe(&facts(11, held.clone()), t0 + Duration::from_millis(2_499)), Step::Nothing);
        assert_eq!(l.observe(&facts(11, held), t0 + Duration::from_millis(2_500)), Step::Claim { expect: 5 });
        assert!(l.claimed(12), "it stood by: the next beat carries everything");
        assert_eq!(l.state(), State::Held(12));

        let mut l = Lease::new(claim(1));
        l.observe(&facts(9, Some((5, claim(2)))), t0);
        l.observe(&facts(10, Some((5, claim(2)))), t0);
        let released = Claim { released: true, ..claim(2) };
        assert_eq!(l.observe(&facts(11, Some((11, released))), t0), Step::Claim { expect: 11 });
    }

    #[test]
    fn a_writer_starting_after_a_crash_waits_out_its_dead_selfs_lease_then_takes_the_prefix() {
        let t0 = Instant::now();
        let mut l = Lease::new(claim(1));
        let dead = Some((3, claim(2)));
        // Its last message is fresh: it waits (seeking: its messages wait with it).
        assert_eq!(l.observe(&facts(40, dead.clone()), t0), Step::Nothing);
        assert_eq!(l.observe(&facts(40, dead.clone()), t0 + Duration::from_millis(500)), Step::Nothing);
        assert_eq!(l.state(), State::Seeking);
        assert_eq!(l.observe(&facts(40, dead.clone()), t0 + Duration::from_millis(1_000)), Step::Claim { expect: 3 });
        // An old last message: free at the first look.
        let mut l = Lease::new(claim(1));
        let old = Facts { last_age: Some(Duration::from_secs(5)), ..facts(40, dead) };
        assert_eq!(l.observe(&old, t0), Step::Claim { expect: 3 });
    }

    #[test]
    fn a_holder_stands_by_when_a_later_claim_is_not_its_own_and_claims_again_when_its_own_is_gone() {
        let t0 = Instant::now();
        let mut l = Lease::new(claim(1));
        l.observe(&Facts::default(), t0);
        assert!(!l.claimed(1));
        assert_eq!(l.observe(&facts(50, Some((1, claim(1)))), t0), Step::Nothing);
        // Aged out of the stream (or a stream made anew): claimed again.
        assert_eq!(l.observe(&facts(50, None), t0), Step::Claim { expect: 0 });
        assert_eq!(l.state(), State::Seeking);
        l.claimed(51);
        // Another writer took the prefix (it judged us gone).
        assert_eq!(l.observe(&facts(60, Some((58, claim(2)))), t0), Step::StandBy);
        assert_eq!(l.state(), State::StandingBy);
        assert_eq!(l.held_by.as_ref().map(|c| c.writer), Some(2));
    }
}
