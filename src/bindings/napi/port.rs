//! The completion port: how results computed on native threads become settled promises.
//!
//! Each owning JS object (a `Store`, a `TouchJournal`, …) has one [`Port`], backed by a single
//! N-API threadsafe function with no JS callback. A promise is created on the JS thread
//! ([`Port::promise`]) and handed out as a [`Ticket`], which is `Send`; whatever thread finishes
//! the work calls [`Ticket::settle`]. Settlements queue up and one threadsafe call drains them
//! on the JS thread, so a group commit of 1,000 appends or a flush waking 10,000 waiters costs
//! one wake-up of the event loop, not one per promise.
//!
//! The same drain also runs [`Job`]s posted with [`Port::post_job`]: work a native thread
//! hands to the JS thread (a journal's timer-driven flush, which must not interleave with
//! synchronous JS code). Jobs run before the settlements of the same drain and do not keep the
//! event loop alive.
//!
//! One threadsafe call is outstanding at a time (the `scheduled` flag). Bun 1.3 was seen to
//! lose a threadsafe call made while the previous one was being dispatched (126 calls, 125
//! callbacks, and the port stalled with settlements queued), so while a call is outstanding a
//! watchdog on the crate's native timer ([`crate::timer`]) checks every
//! [`WATCHDOG_NS`] ns that a drain happened, and calls again if none did. A duplicate call
//! only costs an empty drain.
//!
//! The port keeps the event loop alive exactly while promises are pending (it is referenced on
//! the 0 → 1 transition and unreferenced on 1 → 0), like a timer would. A [`Ticket`] dropped
//! without being settled rejects its promise with `ERR_INTERNAL`, so no promise is ever left
//! pending by a bug in the native code.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use napi::{sys, Env};
use parking_lot::Mutex;

use super::error::js_error;
use super::value::{take_exception, RawValue};
use super::{check, check_napi};
use crate::error::Error;
use crate::timer::{self, mono_now, TimerTarget};

/// How long an outstanding threadsafe call may go without a drain before it is made again.
const WATCHDOG_NS: u64 = 10_000_000;

/// Builds the resolved value on the JS thread (or returns the error to reject with).
pub type Outcome = Box<dyn FnOnce(&Env) -> Result<RawValue, Error> + Send>;

/// Work to run on the JS thread at the next drain.
pub type Job = Box<dyn FnOnce(&Env) + Send>;

struct Queue {
    items: Mutex<Vec<(RawDeferred, Outcome)>>,
    jobs: Mutex<Vec<Job>>,
    scheduled: AtomicBool,
    /// Promises created and not yet settled. Only changed on the JS thread.
    pending: AtomicUsize,
    /// Whether the threadsafe function currently keeps the loop alive. JS thread only.
    referenced: AtomicBool,
    /// The threadsafe function itself, for (un)referencing it from the drain callback.
    tsfn: AtomicPtr<c_void>,
    /// Set when the threadsafe function was destroyed (environment teardown): no more calls.
    dead: AtomicBool,
    /// Drains run so far (the watchdog's progress mark).
    drains: AtomicU64,
    /// Whether the watchdog timer is armed.
    watchdog: AtomicBool,
}

/// Never null, so an `Option<RawDeferred>` (in every parked waiter) costs no extra word.
struct RawDeferred(ptr::NonNull<std::ffi::c_void>);

impl RawDeferred {
    fn new(d: sys::napi_deferred) -> napi::Result<RawDeferred> {
        ptr::NonNull::new(d.cast()).map(RawDeferred).ok_or_else(|| napi::Error::from_reason("no deferred"))
    }

    fn raw(&self) -> sys::napi_deferred {
        self.0.as_ptr().cast()
    }
}
// SAFETY: a napi_deferred is an opaque handle; it is only used (resolved/rejected) on the JS
// thread, inside the threadsafe function's callback or a call from JavaScript.
unsafe impl Send for RawDeferred {}

struct Shared {
    tsfn: sys::napi_threadsafe_function,
    queue: Arc<Queue>,
    this: Weak<Shared>,
}
// SAFETY: napi_call_threadsafe_function / napi_release_threadsafe_function may be called from
// any thread; the other tsfn calls are made only from the JS thread. The queue is `Sync`.
unsafe impl Send for Shared {}
// SAFETY: as above: shared references only make the calls N-API allows from any thread.
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.queue.dead.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: `tsfn` was made by `Port::new` and this is its only release (the last clone of
        // the port going away); N-API allows it from any thread. It fails only while the
        // environment tears down, when the function is finalized anyway: nothing to do then.
        let _closing =
            unsafe { sys::napi_release_threadsafe_function(self.tsfn, sys::ThreadsafeFunctionReleaseMode::release) };
    }
}

/// One object's completion port. Clones share the same threadsafe function.
#[derive(Clone)]
pub struct Port {
    shared: Arc<Shared>,
}

/// The right to settle one promise, from any thread, exactly once.
pub struct Ticket {
    deferred: Option<RawDeferred>,
    shared: Arc<Shared>,
}

impl Port {
    /// Creates the port on the JS thread. It does not keep the loop alive until a promise is
    /// pending.
    pub fn new(env: &Env) -> napi::Result<Port> {
        let queue = Arc::new(Queue {
            items: Mutex::new(Vec::new()),
            jobs: Mutex::new(Vec::new()),
            scheduled: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            referenced: AtomicBool::new(false),
            tsfn: AtomicPtr::new(ptr::null_mut()),
            dead: AtomicBool::new(false),
            drains: AtomicU64::new(0),
            watchdog: AtomicBool::new(false),
        });
        let raw_env = env.raw();
        let mut name = ptr::null_mut();
        // SAFETY: an N-API call on the JS thread with the current call's environment; the name
        // is a static NUL-terminated string of 13 bytes.
        check_napi(unsafe { sys::napi_create_string_utf8(raw_env, c"durable-touch".as_ptr(), 13, &mut name) })?;
        let context = Arc::into_raw(queue.clone()) as *mut c_void;
        let mut tsfn = ptr::null_mut();
        // SAFETY: on the JS thread with the current call's environment. `context` is a strong
        // reference to the queue, owned from here on by the threadsafe function and released by
        // its finalizer `finalize_queue` (or below, if it is not created); `drain_queue` reads it
        // as a `Queue`. No JS function: the callback does all the work.
        let status = unsafe {
            sys::napi_create_threadsafe_function(
                raw_env,
                ptr::null_mut(),
                ptr::null_mut(),
                name,
                0,
                1,
                ptr::null_mut(),
                Some(finalize_queue),
                context,
                Some(drain_queue),
                &mut tsfn,
            )
        };
        if check(status).is_err() {
            // SAFETY: not created, so no finalizer will run: the reference is still ours.
            drop(unsafe { Arc::from_raw(context as *const Queue) });
            return Err(napi::Error::from_reason("cannot create the completion port"));
        }
        queue.tsfn.store(tsfn.cast(), Ordering::Release);
        // SAFETY: the threadsafe function just made, on its JS thread.
        check_napi(unsafe { sys::napi_unref_threadsafe_function(raw_env, tsfn) })?;
        Ok(Port { shared: Arc::new_cyclic(|this| Shared { tsfn, queue, this: this.clone() }) })
    }

    /// Creates a pending promise (JS thread). Returns the ticket that settles it and the
    /// promise value to hand to JavaScript.
    pub fn promise(&self, env: &Env) -> napi::Result<(Ticket, RawValue)> {
        let (deferred, promise) = new_promise(env)?;
        let q = &self.shared.queue;
        if q.pending.fetch_add(1, Ordering::AcqRel) == 0 && !q.referenced.swap(true, Ordering::AcqRel) {
            // SAFETY: the port's threadsafe function, on its JS thread.
            let status = unsafe { sys::napi_ref_threadsafe_function(env.raw(), self.shared.tsfn) };
            if let Err(e) = check(status) {
                // Not referenced after all: keep the count right, and settle the promise (it is
                // already handed to nobody) with the failure.
                q.referenced.store(false, Ordering::Release);
                let ticket = Ticket { deferred: Some(deferred), shared: self.shared.clone() };
                ticket.settle_now(env, |_| Err(e.clone()));
                return Err(super::internal(e));
            }
        }
        Ok((Ticket { deferred: Some(deferred), shared: self.shared.clone() }, promise))
    }

    /// A promise already rejected with `err` (JS thread), for calls refused before any work.
    /// If a JS exception is pending (a user's getter or Proxy trap threw while the arguments
    /// were read), the promise rejects with that exception instead, and the call itself does
    /// not throw: a promise-returning method reports every failure through its promise.
    pub fn rejected(env: &Env, err: &Error) -> napi::Result<RawValue> {
        let thrown = take_exception(env.raw());
        let (deferred, promise) = new_promise(env)?;
        match thrown {
            Some(exception) => {
                // SAFETY: `deferred` was just made and is settled once, here; `exception` is a
                // value of this environment (the one it threw).
                check_napi(unsafe { sys::napi_reject_deferred(env.raw(), deferred.raw(), exception) })?;
            }
            None => settle_deferred(env, deferred, Err(err.clone())).map_err(|(e, _)| super::internal(e))?,
        }
        Ok(promise)
    }

    /// A promise already resolved with `value` (JS thread).
    pub fn resolved(env: &Env, value: RawValue) -> napi::Result<RawValue> {
        let (deferred, promise) = new_promise(env)?;
        settle_deferred(env, deferred, Ok(value)).map_err(|(e, _)| super::internal(e))?;
        Ok(promise)
    }

    /// Runs `job` on the JS thread at the next drain (from any thread). Dropped unrun if the
    /// environment is tearing down.
    pub fn post_job(&self, job: Job) {
        let q = &self.shared.queue;
        if q.dead.load(Ordering::Acquire) {
            return;
        }
        q.jobs.lock().push(job);
        schedule(&self.shared);
    }

    /// Promises created on this port and not settled yet.
    pub fn pending(&self) -> usize {
        self.shared.queue.pending.load(Ordering::Acquire)
    }
}

impl Ticket {
    /// Starts loading the deferred's memory into the cache (the promise is settled soon).
    #[inline]
    pub fn prefetch(&self) {
        if let Some(d) = &self.deferred {
            crate::prefetch::prefetch(d.0.as_ptr());
        }
    }

    /// Settles the promise with `outcome`, which runs on the JS thread.
    pub fn settle(mut self, outcome: Outcome) {
        if let Some(d) = self.deferred.take() {
            post(&self.shared, d, outcome);
        }
    }

    /// Settles the promise at once. Only on the JS thread, inside a call from JavaScript (for
    /// work finished synchronously there, such as a flush called from JS).
    pub fn settle_now<F>(mut self, env: &Env, outcome: F)
    where
        F: FnOnce(&Env) -> Result<RawValue, Error>,
    {
        if let Some(d) = self.deferred.take() {
            let q = &self.shared.queue;
            if q.dead.load(Ordering::Acquire) {
                return;
            }
            // Inside the caller's handle scope: no scope of its own.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outcome(env)))
                .unwrap_or_else(|p| Err(Error::from_panic(p)));
            settle_or_report(env, d, result);
            release_pending(env.raw(), q, 1);
        }
    }

    /// Settles with a value that converts on the JS thread, or with an error.
    pub fn settle_with<T, F>(self, result: Result<T, Error>, convert: F)
    where
        T: Send + 'static,
        F: FnOnce(&Env, T) -> napi::Result<RawValue> + Send + 'static,
    {
        self.settle(Box::new(move |env| {
            let value = result?;
            convert(env, value).map_err(|e| Error::Internal(format!("cannot convert result: {}", e.reason)))
        }));
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(d) = self.deferred.take() {
            post(
                &self.shared,
                d,
                Box::new(|_| Err(Error::Internal("a native operation ended without a result".into()))),
            );
        }
    }
}

fn post(shared: &Shared, deferred: RawDeferred, outcome: Outcome) {
    let q = &shared.queue;
    if q.dead.load(Ordering::Acquire) {
        return;
    }
    q.items.lock().push((deferred, outcome));
    schedule(shared);
}

fn schedule(shared: &Shared) {
    let q = &shared.queue;
    if !q.scheduled.swap(true, Ordering::AcqRel) {
        call_js(shared);
        arm_watchdog(shared);
    }
}

fn call_js(shared: &Shared) {
    // SAFETY: the port's threadsafe function, alive while `shared` is (it is released only by
    // `Shared::drop`); N-API allows this call from any thread.
    let status = unsafe {
        sys::napi_call_threadsafe_function(shared.tsfn, ptr::null_mut(), sys::ThreadsafeFunctionCallMode::nonblocking)
    };
    // It fails only while the environment tears down (`napi_closing`), when the queue is dropped
    // with it, or when the queue is full, which a queue of unbounded size never is. The watchdog
    // calls again if a call was lost.
    let _closing = check(status);
}

fn arm_watchdog(shared: &Shared) {
    let q = &shared.queue;
    if q.watchdog.swap(true, Ordering::AcqRel) {
        return;
    }
    match shared.this.upgrade() {
        Some(me) => {
            let mark = q.drains.load(Ordering::Acquire);
            timer::schedule(mono_now() + WATCHDOG_NS, me, mark);
        }
        None => q.watchdog.store(false, Ordering::Release),
    }
}

impl TimerTarget for Shared {
    /// The watchdog: `mark` is the drain count when it was armed.
    fn on_timer(&self, mark: u64) {
        let q = &self.queue;
        q.watchdog.store(false, Ordering::Release);
        if q.dead.load(Ordering::Acquire) || !q.scheduled.load(Ordering::Acquire) {
            return;
        }
        if q.drains.load(Ordering::Acquire) == mark {
            // No drain since the call: it may have been lost. Call again.
            call_js(self);
        }
        arm_watchdog(self);
    }
}

unsafe extern "C" fn drain_queue(
    env: sys::napi_env,
    _js_cb: sys::napi_value,
    context: *mut c_void,
    _data: *mut c_void,
) {
    if env.is_null() || context.is_null() {
        return;
    }
    // SAFETY: `context` is the queue reference the threadsafe function owns (see `Port::new`),
    // released only by its finalizer, which does not run while a call is being dispatched.
    let q = unsafe { &*(context as *const Queue) };
    q.drains.fetch_add(1, Ordering::AcqRel);
    q.scheduled.store(false, Ordering::Release);
    let js_env = Env::from_raw(env);
    let jobs = std::mem::take(&mut *q.jobs.lock());
    for job in jobs {
        // A job that panicked has done what it could; the drain goes on with the next one.
        let _panicked =
            in_handle_scope(&js_env, || std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&js_env))));
    }
    let items = std::mem::take(&mut *q.items.lock());
    if items.is_empty() {
        return;
    }
    let count = items.len();
    for (deferred, outcome) in items {
        settle_here(&js_env, deferred, outcome);
    }
    release_pending(env, q, count);
}

/// Resolves or rejects one promise on the JS thread, in its own handle scope.
fn settle_here(js_env: &Env, deferred: RawDeferred, outcome: Outcome) {
    in_handle_scope(js_env, || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outcome(js_env)))
            .unwrap_or_else(|p| Err(Error::from_panic(p)));
        settle_or_report(js_env, deferred, result);
    });
}

/// Runs `f` in a handle scope of its own (JS thread, outside any call from JavaScript: the
/// values `f` makes are released when it returns). Should the scope fail to open, `f` runs in
/// the enclosing one, which holds its values a little longer.
fn in_handle_scope<R>(env: &Env, f: impl FnOnce() -> R) -> R {
    let mut scope = ptr::null_mut();
    // SAFETY: on the JS thread with the drain's environment; `scope` is a local of the type
    // N-API writes.
    let opened = check(unsafe { sys::napi_open_handle_scope(env.raw(), &mut scope) }).is_ok();
    let r = f();
    if opened {
        // SAFETY: the scope opened above, closed once, after every value made in it is used.
        // Closing the innermost scope cannot fail.
        let _closed = check(unsafe { sys::napi_close_handle_scope(env.raw(), scope) });
    }
    r
}

/// A new pending promise and its deferred (JS thread).
#[inline]
fn new_promise(env: &Env) -> napi::Result<(RawDeferred, RawValue)> {
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    // SAFETY: on the JS thread with the current call's environment; both out-pointers are
    // locals of the types N-API writes.
    check_napi(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
    Ok((RawDeferred::new(deferred)?, promise))
}

/// Resolves with the value or rejects with the JS error of the failure (JS thread).
///
/// When building the error fails, the deferred is handed back unsettled (`Err(Some(d))`), so
/// the caller can settle it otherwise. When N-API's resolve or reject itself fails (`Err(None)`),
/// the deferred may already be released by N-API and must not be used again.
#[inline]
fn settle_deferred(
    env: &Env,
    deferred: RawDeferred,
    result: Result<RawValue, Error>,
) -> Result<(), (Error, Option<RawDeferred>)> {
    let status = match result {
        // SAFETY: `deferred` is an unsettled deferred of this environment (a `RawDeferred` is
        // settled once: it is consumed here), `value` a value of it.
        Ok(value) => unsafe { sys::napi_resolve_deferred(env.raw(), deferred.raw(), value) },
        Err(err) => {
            let reason = match js_error(env, &err) {
                Ok(r) => r,
                Err(e) => return Err((e, Some(deferred))),
            };
            // SAFETY: as above.
            unsafe { sys::napi_reject_deferred(env.raw(), deferred.raw(), reason) }
        }
    };
    check(status).map_err(|e| (e, None))
}

/// [`settle_deferred`]; should building the value or the error fail, rejects with a plain
/// string instead, so the promise is not left pending. If that fails too, or N-API refuses to
/// settle, the environment cannot make or settle values any more (it is tearing down, the only
/// case where these calls fail): nothing is left to do.
#[inline]
fn settle_or_report(env: &Env, deferred: RawDeferred, result: Result<RawValue, Error>) {
    if let Err((e, Some(deferred))) = settle_deferred(env, deferred, result) {
        let reason = super::value::Out::new(env).str(&format!("ERR_INTERNAL: cannot settle a promise: {e}"));
        if let Ok(reason) = reason {
            // SAFETY: `deferred` is still unsettled (handed back by `settle_deferred`), `reason`
            // a value of this environment.
            let _teardown = check(unsafe { sys::napi_reject_deferred(env.raw(), deferred.raw(), reason) });
        }
    }
}

/// `count` promises were settled (JS thread): stop keeping the loop alive when none is left.
fn release_pending(env: sys::napi_env, q: &Queue, count: usize) {
    if q.pending.fetch_sub(count, Ordering::AcqRel) == count && q.referenced.swap(false, Ordering::AcqRel) {
        // SAFETY: the queue's threadsafe function (set in `Port::new` before any promise), on
        // its JS thread. Unreferencing cannot fail for a live function; if the environment is
        // tearing down the loop ends anyway.
        let _teardown =
            check(unsafe { sys::napi_unref_threadsafe_function(env, q.tsfn.load(Ordering::Acquire).cast()) });
    }
}

/// Runs when the threadsafe function is destroyed: releases the queue reference it held.
///
/// # Safety
/// `context` must be the queue reference handed to `napi_create_threadsafe_function`; called
/// once, by N-API.
unsafe extern "C" fn finalize_queue(_env: sys::napi_env, _data: *mut c_void, context: *mut c_void) {
    if !context.is_null() {
        // SAFETY: guaranteed by the caller: the reference `Port::new` handed over.
        let queue = unsafe { Arc::from_raw(context as *const Queue) };
        queue.dead.store(true, Ordering::Release);
        // Outcomes still queued belong to promises of a dead environment.
        queue.items.lock().clear();
        queue.jobs.lock().clear();
    }
}
