//! `WaitListener`: the JS class over [`crate::listener::WaitListener`]. Conversion only.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use parking_lot::Mutex;

use super::engine::TouchEngine;
use super::napi::value::class_instance;
use super::napi::{throw, unknown, Js, Out, Port};
use crate::error::Error;
use crate::listener::{ListenOptions, WaitListener as CoreListener};

/// Where a `WaitListener` listens, and the JS server it passes the rest to.
#[napi(object, object_to_js = false)]
pub struct WaitListenerOptions {
    /// Default `"127.0.0.1"`.
    pub host: Option<String>,
    /// Default 0: any free port (`listener.port` says which).
    pub port: Option<u32>,
    /// The port of the JS server (on `upstreamHost`) that answers every other request.
    pub upstream_port: u32,
    /// An IP address; default `"127.0.0.1"`.
    pub upstream_host: Option<String>,
}

/// `WaitListener.stats()`.
#[napi(object, object_from_js = false)]
pub struct WaitListenerStats {
    /// Connections open now.
    pub connections: f64,
    /// Waits parked now.
    pub waiting: f64,
    /// Waits answered by the listener.
    pub answered: f64,
    /// Requests passed to the JS server one by one (waits the engine refused included).
    pub passed: f64,
    /// Connections handed to the JS server whole (framing the listener does not follow:
    /// chunked bodies, `Expect`, upgrades, HTTP/1.0, heads it cannot parse).
    pub handed: f64,
}

/// A native HTTP/1.1 front answering touch waits from `engine` without JavaScript; every other
/// request goes to the JS server at `upstreamPort`.
#[napi]
pub struct WaitListener {
    listener: Arc<Mutex<Option<CoreListener>>>,
    port: u32,
    js: Port,
}

#[napi]
impl WaitListener {
    /// Listens at once (throws `ERR_LISTEN` for a port in use or a host that does not resolve).
    /// With `engine` null, every request goes to the JS server until `serve(engine)`.
    #[napi(constructor, ts_args_type = "engine: TouchEngine | null, options: WaitListenerOptions")]
    pub fn new(env: &Env, engine: Unknown, options: WaitListenerOptions) -> napi::Result<WaitListener> {
        let engine = match engine.get_type()? {
            ValueType::Null | ValueType::Undefined => None,
            _ => Some(core_engine(env, engine)?),
        };
        let opts = listen_options(options).map_err(|e| throw(env, e))?;
        let listener = CoreListener::start(engine, opts).map_err(|e| throw(env, e))?;
        let port = listener.port() as u32;
        Ok(WaitListener { listener: Arc::new(Mutex::new(Some(listener))), port, js: Port::new(env)? })
    }

    /// Answers waits from `engine` from now on (throws if it already serves one, or is closed).
    #[napi(ts_args_type = "engine: TouchEngine")]
    pub fn serve(&self, env: &Env, engine: Unknown) -> napi::Result<()> {
        let engine = core_engine(env, engine)?;
        match self.listener.lock().as_ref() {
            Some(l) => l.serve(engine).map_err(|e| throw(env, e)),
            None => Err(throw(env, Error::Closed("listener"))),
        }
    }

    /// What it has done (all zero once closed).
    #[napi]
    pub fn stats(&self) -> WaitListenerStats {
        let s = self.listener.lock().as_ref().map(|l| l.stats());
        let s = s.unwrap_or(crate::listener::ListenerStats {
            connections: 0,
            waiting: 0,
            answered: 0,
            passed: 0,
            handed: 0,
        });
        WaitListenerStats {
            connections: s.connections as f64,
            waiting: s.waiting as f64,
            answered: s.answered as f64,
            passed: s.passed as f64,
            handed: s.handed as f64,
        }
    }

    /// The port it listens on.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        self.port
    }

    /// Stops listening and closes idle connections; one with a request in hand gets 500 ms to
    /// finish it, then is closed (a wait still parked is aborted). Close the engine first to
    /// answer every parked wait.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<Unknown<'env>> {
        let (ticket, promise) = self.js.promise(env)?;
        let listener = self.listener.lock().take();
        let closed = std::thread::Builder::new().name("dt-listener-close".into()).spawn(move || {
            if let Some(mut l) = listener {
                l.close();
            }
            ticket.settle_with(Ok(()), |env, ()| Out::new(env).undefined());
        });
        if let Err(e) = closed {
            return Err(throw(env, Error::Internal(format!("listener close thread: {e}"))));
        }
        Ok(unknown(env, promise))
    }
}

fn core_engine(env: &Env, engine: Unknown) -> napi::Result<crate::engine::TouchEngine> {
    Ok(class_instance::<TouchEngine>(Js::new(env, engine.raw()))
        .ok_or_else(|| throw(env, Error::invalid("engine must be a TouchEngine")))?
        .core()
        .clone())
}

fn listen_options(o: WaitListenerOptions) -> crate::Result<ListenOptions> {
    let port =
        |p: u32, what: &str| u16::try_from(p).map_err(|_| Error::invalid(format!("{what} must be a port (0-65535)")));
    let upstream_host = o.upstream_host.as_deref().unwrap_or("127.0.0.1");
    let ip: IpAddr = upstream_host.parse().map_err(|_| Error::invalid("upstreamHost must be an IP address"))?;
    Ok(ListenOptions {
        host: o.host.unwrap_or_else(|| "127.0.0.1".into()),
        port: port(o.port.unwrap_or(0), "port")?,
        upstream: SocketAddr::new(ip, port(o.upstream_port, "upstreamPort")?),
        head_timeout: crate::listener::HEAD_TIMEOUT,
    })
}
