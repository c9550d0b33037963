//! AbortSignal support for promise-returning methods (`TouchEngine.wait`,
//! `TouchJournal.waitForAny`): check `signal.aborted`, listen for the signal's `abort` event
//! (with `addEventListener`, so a user's `onabort` is left alone), and stop listening once the
//! operation settled. JS thread only.
//!
//! One listener function serves every signal of a JS thread. A signal being listened to carries
//! its slot in this thread's registry under a private symbol; the slot holds what to do for each
//! operation waiting on that signal. So a wait costs a property read and write and one
//! `addEventListener`, not a new function, a finalizer (a weak handle the GC must visit) and two
//! references per wait; waits sharing one signal share one listener. The listener is removed
//! when the last operation on its signal settles or when it fires. The symbol property stays on
//! the signal (a stale slot is recognised by its generation). A frozen signal cannot carry the
//! slot and is refused. In the e2e bench under Node this took the append→wake p50 from 20.1 to
//! 16.8 ms and the longest GC pause from 46 to 14 ms.

use std::cell::RefCell;

use napi::{sys, Env};

use super::callback::{self, CallInfo};
use super::handle::{external_word, Ref};
use super::value::{take_exception, Js, Out};
use crate::error::{Error, Result};

/// What to do when the signal fires (runs at most once, on the JS thread).
pub type OnAbort = Box<dyn FnOnce(&Env)>;

/// One operation's registration, released by [`AbortHook::release`] once it settled.
pub struct AbortHook {
    slot: u32,
    generation: u32,
    token: u64,
}

struct Slot {
    generation: u32,
    /// The signal (a strong reference while the slot is live), for removing the listener.
    signal: Option<Ref>,
    waits: Vec<(u64, OnAbort)>,
}

/// This JS thread's listener, symbol and slots.
struct Registry {
    symbol: Ref,
    listener: Ref,
    slots: Vec<Slot>,
    free: Vec<u32>,
    next_token: u64,
}

thread_local! {
    static REGISTRY: RefCell<Option<Registry>> = const { RefCell::new(None) };
}

/// A slot and generation packed into the word of an external value (never 0).
fn encode(slot: u32, generation: u32) -> usize {
    (((slot as u64) << 32) | generation as u64) as usize
}

fn decode(word: usize) -> (u32, u32) {
    let v = word as u64;
    ((v >> 32) as u32, v as u32)
}

/// The slot recorded on `obj` under our symbol, if any. A getter that throws (a proxy, say)
/// counts as no slot; its exception is cleared.
fn slot_of(symbol: &Js<'_>, obj: &Js<'_>) -> Option<(u32, u32)> {
    match obj.get_by_key(symbol) {
        Ok(v) => v.external_word().map(decode),
        Err(_) => {
            let _cleared = take_exception(obj.env_raw());
            None
        }
    }
}

/// Runs `f` with this thread's registry for `env`, creating it on first use (and anew for
/// another environment on this thread: the old one's were deleted by its teardown hook).
fn with_registry<R>(env: &Env, f: impl FnOnce(&mut Registry) -> Result<R>) -> Result<R> {
    REGISTRY.with(|cell| {
        let mut guard = cell.borrow_mut();
        if guard.as_ref().is_none_or(|r| !r.symbol.is_of(env)) {
            *guard = Some(Registry::new(env)?);
        }
        f(guard.as_mut().expect("created above"))
    })
}

/// Deletes this thread's registry's references if it belongs to `env` (its teardown): the
/// symbol, the listener and the signals of live slots. Their operations cannot settle any more.
pub(super) fn forget(env: &Env) {
    let registry = REGISTRY.with(|cell| {
        let mut guard = cell.borrow_mut();
        if guard.as_ref().is_some_and(|r| r.symbol.is_of(env)) {
            guard.take()
        } else {
            None
        }
    });
    if let Some(r) = registry {
        let signals = r.slots.into_iter().filter_map(|s| s.signal);
        for rf in [r.symbol, r.listener].into_iter().chain(signals) {
            // A live reference of this environment: deleting cannot fail.
            let _deleted = rf.delete(env);
        }
    }
}

impl Registry {
    fn new(env: &Env) -> Result<Registry> {
        let out = Out::new(env);
        let desc = out.str("durable-touch abort slot").map_err(super::from_napi)?;
        let mut symbol = std::ptr::null_mut();
        // SAFETY: an N-API call on the JS thread with the current call's environment and a
        // string made in it; `symbol` is a local of the type N-API writes.
        super::check(unsafe { sys::napi_create_symbol(env.raw(), desc, &mut symbol) })?;
        let listener = callback::function(env, "onAbort", on_abort)?;
        Ok(Registry {
            symbol: Ref::new(out.js(symbol), 1)?,
            listener: Ref::new(out.js(listener), 1)?,
            slots: Vec::new(),
            free: Vec::new(),
            next_token: 0,
        })
    }

    fn live(&mut self, slot: u32, generation: u32) -> Option<&mut Slot> {
        self.slots.get_mut(slot as usize).filter(|s| s.generation == generation && s.signal.is_some())
    }

    /// Frees a live slot; returns its signal reference (the caller removes the listener).
    fn free_slot(&mut self, slot: u32) -> Option<Ref> {
        let s = &mut self.slots[slot as usize];
        s.generation = s.generation.wrapping_add(1).max(1);
        s.waits.clear();
        self.free.push(slot);
        s.signal.take()
    }
}

/// Checks that `signal` looks like an AbortSignal; returns whether it is already aborted.
pub fn is_aborted(signal: &Js<'_>) -> Result<bool> {
    let bad = || Error::invalid("signal must be an AbortSignal");
    if !signal.is_object() {
        return Err(bad());
    }
    // A getter that throws (a Proxy's trap, an accessor) makes it no AbortSignal: its
    // exception is cleared, so the wait rejects instead of throwing.
    let get = |name: &str| {
        signal.get(name).map_err(|_| {
            let _cleared = take_exception(signal.env_raw());
            bad()
        })
    };
    let add = get("addEventListener")?.ok_or_else(bad)?;
    if add.type_of() != sys::ValueType::napi_function {
        return Err(bad());
    }
    match get("aborted")? {
        Some(v) if v.type_of() == sys::ValueType::napi_boolean => v.boolean("signal.aborted"),
        _ => Err(bad()),
    }
}

/// Runs `on_abort_fn` when `signal` fires `abort`, unless the hook is released first.
pub fn listen(env: &Env, signal: &Js<'_>, on_abort_fn: OnAbort) -> Result<AbortHook> {
    // Registration happens under the registry borrow; the JS calls (addEventListener) after it.
    let (hook, attach) = with_registry(env, |reg| {
        let symbol = reg.symbol.value(env).ok_or_else(|| Error::Internal("abort symbol lost".into()))?;
        let token = reg.next_token;
        reg.next_token += 1;
        if let Some((slot, generation)) = slot_of(&symbol, signal) {
            if let Some(s) = reg.live(slot, generation) {
                s.waits.push((token, on_abort_fn));
                return Ok((AbortHook { slot, generation, token }, None));
            }
        }
        let slot = match reg.free.pop() {
            Some(i) => i,
            None => {
                reg.slots.push(Slot { generation: 0, signal: None, waits: Vec::new() });
                (reg.slots.len() - 1) as u32
            }
        };
        let s = &mut reg.slots[slot as usize];
        s.generation = s.generation.wrapping_add(1).max(1);
        let generation = s.generation;
        match Ref::new(*signal, 1) {
            Ok(r) => s.signal = Some(r),
            Err(e) => {
                reg.free.push(slot);
                return Err(e);
            }
        }
        s.waits.push((token, on_abort_fn));
        let tagged = external_word(env, encode(slot, generation))
            .and_then(|tag| signal.set_by_key(symbol.raw(), tag))
            .map(|()| slot_of(&symbol, signal) == Some((slot, generation)));
        if !matches!(tagged, Ok(true)) {
            if let Some(r) = reg.free_slot(slot) {
                // A reference just made in this environment: deleting it cannot fail.
                let _deleted = r.delete(env);
            }
            let _cleared = take_exception(env.raw());
            return Err(Error::invalid("signal must be an AbortSignal that accepts properties (not frozen)"));
        }
        let listener = reg.listener.value(env).ok_or_else(|| Error::Internal("abort listener lost".into()))?;
        Ok((AbortHook { slot, generation, token }, Some(listener.raw())))
    })?;
    if let Some(listener) = attach {
        let abort = Out::new(env).str("abort").map_err(super::from_napi)?;
        if let Err(e) = signal.call_method(c"addEventListener", &[abort, listener]) {
            hook.release(env);
            // The signal's own method threw (`Js::call` cleared its exception): bad input.
            let why = match e {
                Error::Internal(m) => m,
                other => other.to_string(),
            };
            return Err(Error::invalid(format!("signal must be an AbortSignal: its addEventListener threw: {why}")));
        }
    }
    Ok(hook)
}

/// Removes the shared listener from the signal behind `signal_ref`, then deletes the
/// reference. The operation has settled (or is being aborted): a `removeEventListener` that
/// throws must not change that, so its exception is cleared (and `Js::call` already did).
fn stop_listening(env: &Env, signal_ref: Ref, listener: super::RawValue) {
    if let Some(signal) = signal_ref.value(env) {
        if let Ok(abort) = Out::new(env).str("abort") {
            let _thrown = signal.call_method(c"removeEventListener", &[abort, listener]);
        }
    }
    // A live reference of this environment (checked by `value` above): deleting cannot fail.
    let _deleted = signal_ref.delete(env);
}

impl AbortHook {
    /// Forgets this operation (JS thread, once it settled); the last one on a signal removes
    /// the listener.
    pub fn release(self, env: &Env) {
        let freed = with_registry(env, |reg| {
            let Some(s) = reg.live(self.slot, self.generation) else { return Ok(None) };
            s.waits.retain(|(t, _)| *t != self.token);
            if !s.waits.is_empty() {
                return Ok(None);
            }
            let signal = reg.free_slot(self.slot);
            Ok(signal.zip(reg.listener.value(env).map(|l| l.raw())))
        });
        // No registry (it could not be made) means nothing was registered to release.
        if let Ok(Some((signal_ref, listener))) = freed {
            stop_listening(env, signal_ref, listener);
        }
    }
}

/// The shared listener: `this` is the signal (EventTarget calls listeners with the event's
/// current target); `event.target` is used when a polyfill calls it otherwise.
unsafe extern "C" fn on_abort(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: N-API's own arguments to this callback.
    unsafe { callback::entry(env, info, on_abort_body, super::js_error) }
}

fn on_abort_body(call: &CallInfo<'_>) -> Result<super::RawValue> {
    let env = call.env;
    let taken = with_registry(env, |reg| {
        let Some(symbol) = reg.symbol.value(env) else { return Ok(None) };
        let this = call.this();
        let mut found = if this.is_nullish() { None } else { slot_of(&symbol, &this) };
        if found.is_none() && !call.is_empty() && !call.arg(0).is_nullish() {
            match call.arg(0).get_named(c"target") {
                Ok(Some(target)) => found = slot_of(&symbol, &target),
                Ok(None) => {}
                Err(_) => {
                    let _cleared = take_exception(env.raw());
                }
            }
        }
        let Some((slot, generation)) = found else { return Ok(None) };
        let Some(s) = reg.live(slot, generation) else { return Ok(None) };
        let waits = std::mem::take(&mut s.waits);
        let signal = reg.free_slot(slot);
        Ok(Some((waits, signal, reg.listener.value(env).map(|l| l.raw()))))
    });
    if let Ok(Some((waits, signal_ref, listener))) = taken {
        // Stop listening (as a `once` listener would), then run the callbacks; the registry is
        // not borrowed here, so they may settle (and release) synchronously.
        if let (Some(signal_ref), Some(listener)) = (signal_ref, listener) {
            stop_listening(env, signal_ref, listener);
        }
        for (_, f) in waits {
            // A callback that panicked has done what it could; the others still run.
            let _panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(env)));
        }
    }
    Out::new(env).undefined().map_err(super::from_napi)
}
