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

use super::js::js_error;
use crate::error::Error;
use crate::timer::{self, mono_now, TimerTarget};

/// How long an outstanding threadsafe call may go without a drain before it is made again.
const WATCHDOG_NS: u64 = 10_000_000;

/// Builds the resolved value on the JS thread (or returns the error to reject with).
pub type Outcome = Box<dyn FnOnce(&Env) -> Result<sys::napi_value, Error> + Send>;

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
// SAFETY: a napi_deferred is an opaque handle; it is only dereferenced (resolved/rejected) on
// the JS thread, inside the threadsafe function's callback.
unsafe impl Send for RawDeferred {}

struct Shared {
    tsfn: sys::napi_threadsafe_function,
    queue: Arc<Queue>,
    this: Weak<Shared>,
}
// SAFETY: napi_call_threadsafe_function / napi_release_threadsafe_function may be called from
// any thread; the other tsfn calls are made only from the JS thread.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.queue.dead.load(Ordering::Acquire) {
            return;
        }
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
        check(unsafe { sys::napi_create_string_utf8(raw_env, c"durable-touch".as_ptr(), 13, &mut name) })?;
        let context = Arc::into_raw(queue.clone()) as *mut c_void;
        let mut tsfn = ptr::null_mut();
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
        if status != sys::Status::napi_ok {
            drop(unsafe { Arc::from_raw(context as *const Queue) });
            return Err(napi::Error::from_reason("cannot create the completion port"));
        }
        queue.tsfn.store(tsfn.cast(), Ordering::Release);
        check(unsafe { sys::napi_unref_threadsafe_function(raw_env, tsfn) })?;
        Ok(Port { shared: Arc::new_cyclic(|this| Shared { tsfn, queue, this: this.clone() }) })
    }

    /// Creates a pending promise (JS thread). Returns the ticket that settles it and the
    /// promise value to hand to JavaScript.
    pub fn promise(&self, env: &Env) -> napi::Result<(Ticket, sys::napi_value)> {
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        check(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
        let deferred = RawDeferred::new(deferred)?;
        let q = &self.shared.queue;
        if q.pending.fetch_add(1, Ordering::AcqRel) == 0 && !q.referenced.swap(true, Ordering::AcqRel) {
            unsafe { sys::napi_ref_threadsafe_function(env.raw(), self.shared.tsfn) };
        }
        Ok((Ticket { deferred: Some(deferred), shared: self.shared.clone() }, promise))
    }

    /// A promise already rejected with `err` (JS thread), for calls refused before any work.
    pub fn rejected(env: &Env, err: &Error) -> napi::Result<sys::napi_value> {
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        check(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
        check(unsafe { sys::napi_reject_deferred(env.raw(), deferred, js_error(env.raw(), err)) })?;
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
        F: FnOnce(&Env) -> Result<sys::napi_value, Error>,
    {
        if let Some(d) = self.deferred.take() {
            let q = &self.shared.queue;
            if q.dead.load(Ordering::Acquire) {
                return;
            }
            // Inside the caller's handle scope: no scope of its own.
            let raw = env.raw();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outcome(env)))
                .unwrap_or_else(|p| Err(Error::from_panic(p)));
            unsafe {
                match result {
                    Ok(value) => sys::napi_resolve_deferred(raw, d.raw(), value),
                    Err(err) => sys::napi_reject_deferred(raw, d.raw(), js_error(raw, &err)),
                };
            }
            release_pending(raw, q, 1);
        }
    }

    /// Settles with a value that converts on the JS thread, or with an error.
    pub fn settle_with<T, F>(self, result: Result<T, Error>, convert: F)
    where
        T: Send + 'static,
        F: FnOnce(&Env, T) -> napi::Result<sys::napi_value> + Send + 'static,
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
    // Fails only while the environment tears down; the queue is then dropped with it.
    unsafe {
        sys::napi_call_threadsafe_function(shared.tsfn, ptr::null_mut(), sys::ThreadsafeFunctionCallMode::nonblocking)
    };
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
    let q = unsafe { &*(context as *const Queue) };
    q.drains.fetch_add(1, Ordering::AcqRel);
    q.scheduled.store(false, Ordering::Release);
    let js_env = Env::from_raw(env);
    let jobs = std::mem::take(&mut *q.jobs.lock());
    for job in jobs {
        let mut scope = ptr::null_mut();
        unsafe { sys::napi_open_handle_scope(env, &mut scope) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&js_env)));
        unsafe { sys::napi_close_handle_scope(env, scope) };
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
    let env = js_env.raw();
    let mut scope = ptr::null_mut();
    unsafe { sys::napi_open_handle_scope(env, &mut scope) };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outcome(js_env)))
        .unwrap_or_else(|p| Err(Error::from_panic(p)));
    unsafe {
        match result {
            Ok(value) => sys::napi_resolve_deferred(env, deferred.raw(), value),
            Err(err) => sys::napi_reject_deferred(env, deferred.raw(), js_error(env, &err)),
        };
        sys::napi_close_handle_scope(env, scope);
    }
}

/// `count` promises were settled (JS thread): stop keeping the loop alive when none is left.
fn release_pending(env: sys::napi_env, q: &Queue, count: usize) {
    if q.pending.fetch_sub(count, Ordering::AcqRel) == count && q.referenced.swap(false, Ordering::AcqRel) {
        unsafe { sys::napi_unref_threadsafe_function(env, q.tsfn.load(Ordering::Acquire).cast()) };
    }
}

/// Runs when the threadsafe function is destroyed: releases the queue reference it held.
unsafe extern "C" fn finalize_queue(_env: sys::napi_env, _data: *mut c_void, context: *mut c_void) {
    if !context.is_null() {
        let queue = unsafe { Arc::from_raw(context as *const Queue) };
        queue.dead.store(true, Ordering::Release);
        // Outcomes still queued belong to promises of a dead environment.
        queue.items.lock().clear();
        queue.jobs.lock().clear();
    }
}

fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::from_reason(format!("napi call failed with status {status}")))
    }
}
