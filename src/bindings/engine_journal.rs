//! `EngineJournal`: a stream's journal inside a `TouchEngine`, as the reference manager's
//! `getOrCreateJournal` / `getJournalIfExists` hand it out: the reference journal's methods,
//! over the journal the engine's batches touch and its waits park in. Made only by
//! `TouchEngine.journal()`. Conversion only; the checks and the getters (`journal_getters!`)
//! are the `TouchJournal` class's ([`super::journal`]).

use napi::bindgen_prelude::*;
use napi_derive::napi;

use super::journal::convert::parse_wait;
use super::journal::{
    exact_touched_since_any_args, journal_getters, js_waiter, maybe_touched_since_any_args, maybe_touched_since_args,
    set_coalesce_args, touch_args, wait_parsed, InJsCall,
};
use super::napi::{Js, Port};
use crate::journal::{Journal, Resolve, Waker};

/// A stream's journal inside a `TouchEngine` (see `TouchEngine.journal`): touches reach the
/// engine's waiters, and waits here wake on the engine's batches.
#[napi]
pub struct EngineJournal {
    journal: Journal,
    port: Port,
}

impl EngineJournal {
    pub(crate) fn new(env: &Env, journal: Journal) -> napi::Result<EngineJournal> {
        Ok(EngineJournal { journal, port: Port::new(env)? })
    }
}

#[napi]
impl EngineJournal {
    /// Adds a touch to the pending bucket (J6).
    #[napi(ts_args_type = "keyId: number, sourceOffsetSeq?: bigint | null, routingKey?: string | null")]
    pub fn touch(
        &self,
        env: &Env,
        key_id: Unknown,
        source_offset_seq: Option<Unknown>,
        routing_key: Option<Unknown>,
    ) -> napi::Result<()> {
        touch_args(env, &self.journal, key_id, source_offset_seq, routing_key)
    }

    /// J7: the flush delay for the next bucket, clamped to [1, bucketMs].
    #[napi(ts_args_type = "ms: number")]
    pub fn set_coalesce_ms(&self, env: &Env, ms: Unknown) -> napi::Result<()> {
        set_coalesce_args(env, &self.journal, ms)
    }

    /// J5: false means the key was certainly not flushed after `sinceGeneration`.
    #[napi(ts_args_type = "keyId: number, sinceGeneration: number")]
    pub fn maybe_touched_since(&self, env: &Env, key_id: Unknown, since: Unknown) -> napi::Result<bool> {
        maybe_touched_since_args(env, &self.journal, key_id, since)
    }

    /// J5 for any of `keyIds`.
    #[napi(ts_args_type = "keyIds: number[] | Uint32Array, sinceGeneration: number")]
    pub fn maybe_touched_since_any(&self, env: &Env, key_ids: Unknown, since: Unknown) -> napi::Result<bool> {
        maybe_touched_since_any_args(env, &self.journal, key_ids, since)
    }

    /// J10: true / false from the exact history, or null when it cannot tell.
    #[napi(ts_args_type = "routingKeys: string[], sinceGeneration: number", ts_return_type = "boolean | null")]
    pub fn exact_touched_since_any(&self, env: &Env, keys: Unknown, since: Unknown) -> napi::Result<Option<bool>> {
        exact_touched_since_any_args(env, &self.journal, keys, since)
    }

    /// J11: resolves with the hit when a flush after `afterGeneration` touches one of the keys,
    /// or null on timeout, abort or `stop()`. Exactly once.
    #[napi(ts_args_type = "args: WaitForAnyArgs", ts_return_type = "Promise<TouchHit | null>")]
    pub fn wait_for_any<'env>(&self, env: &'env Env, args: Unknown) -> napi::Result<Unknown<'env>> {
        let parsed = parse_wait(&Js::new(env, args.raw()));
        wait_parsed(env, &self.journal, &self.port, parsed, |ticket, hook| {
            // The engine's journal wakes on the engine's and the timer's threads too; the JS
            // waiter settles through its port from there.
            let waiter = js_waiter(ticket, hook);
            Box::new(move |hit, _| waiter.wake(hit)) as Resolve
        })
    }

    /// Flushes the pending bucket now. Returns whether a generation was produced.
    #[napi]
    pub fn flush(&self, env: &Env) -> bool {
        let _js = InJsCall::enter(env);
        self.journal.flush()
    }
}

journal_getters!(EngineJournal);

#[napi]
impl EngineJournal {
    /// Cancels the timers and resolves every pending wait with null, the engine's own waits
    /// included (they answer `touched: false`). Returns how many. The journal stays usable.
    #[napi]
    pub fn stop(&self, env: &Env) -> f64 {
        let _js = InJsCall::enter(env);
        self.journal.stop() as f64
    }
}
