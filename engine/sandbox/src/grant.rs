//! What a `code.wasm` component is granted (DESIGN §4: it computes on its
//! input; no files, no network, no environment, no waiting), and nothing
//! more: the linker holds only those WASI interfaces. Everything else a
//! component imports from `wasi:*` (a Rust component built for
//! `wasm32-wasip2` imports files and sockets whether it uses them or not)
//! is linked per component to a function that stops the guest with an
//! error naming the call, so the component loads but cannot reach it.

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{
    Component, HasData, HasSelf, Linker, Resource, ResourceTable, ResourceType, Val,
};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksCtxView, WasiClocksView};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::{cli, clocks, io, random};
use wasmtime_wasi::random::WasiRandom;

use crate::{GuestState, Node};

/// The interfaces a component is granted, without their version (the
/// linker serves a component's 0.2.x imports from wasmtime-wasi's 0.2.x).
pub(crate) const GRANTED: &[&str] = &[
    "wasi:cli/environment", // empty: no variables, no arguments
    "wasi:cli/exit",
    "wasi:cli/stdin",  // empty
    "wasi:cli/stdout", // captured
    "wasi:cli/stderr", // captured
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin", // all "not a terminal"
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:io/error",
    "wasi:io/streams",
    "wasi:io/poll",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock", // the time only: no waiting (`NoWaiting`)
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
];

/// A call to something a code node is not granted.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{call} is not available to code.wasm: {why}")]
pub struct NotGranted {
    call: String,
    why: &'static str,
}

/// The host type of every resource of an interface that is not granted
/// (no value of it is ever made).
struct NotGrantedResource;

const WAIT: &str = "a code node cannot wait or sleep; use a flow.wait node";

/// The `wasi:io` hosts work on the resource table alone.
struct IoTable;

impl HasData for IoTable {
    type Data<'a> = &'a mut ResourceTable;
}

/// `wasi:clocks/monotonic-clock` that tells the time and refuses to wait:
/// a guest blocked in a host call is beyond the epoch's reach (the host's
/// deadline still ends it, but it would hold its slot doing nothing).
struct NoWaiting;

impl HasData for NoWaiting {
    type Data<'a> = NoWaitingView<'a>;
}

struct NoWaitingView<'a>(WasiClocksCtxView<'a>);

impl clocks::monotonic_clock::Host for NoWaitingView<'_> {
    fn now(&mut self) -> wasmtime::Result<clocks::monotonic_clock::Instant> {
        clocks::monotonic_clock::Host::now(&mut self.0)
    }

    fn resolution(&mut self) -> wasmtime::Result<clocks::monotonic_clock::Duration> {
        clocks::monotonic_clock::Host::resolution(&mut self.0)
    }

    fn subscribe_instant(
        &mut self,
        _when: clocks::monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        Err(not_granted("wasi:clocks/monotonic-clock.subscribe-instant", WAIT).into())
    }

    fn subscribe_duration(
        &mut self,
        _when: clocks::monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        Err(not_granted("wasi:clocks/monotonic-clock.subscribe-duration", WAIT).into())
    }
}

fn not_granted(call: &str, why: &'static str) -> NotGranted {
    NotGranted {
        call: call.to_string(),
        why,
    }
}

/// The linker with the granted interfaces and the world's own imports.
pub(crate) fn granted_linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<GuestState>> {
    type S = GuestState;
    let mut l: Linker<S> = Linker::new(engine);
    io::error::add_to_linker::<S, IoTable>(&mut l, |s| &mut s.table)?;
    io::streams::add_to_linker::<S, IoTable>(&mut l, |s| &mut s.table)?;
    io::poll::add_to_linker::<S, IoTable>(&mut l, |s| &mut s.table)?;
    cli::environment::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::exit::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::stdin::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::stdout::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::stderr::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::terminal_input::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::terminal_output::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::terminal_stdin::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::terminal_stdout::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    cli::terminal_stderr::add_to_linker::<S, WasiCli>(&mut l, <S as WasiCliView>::cli)?;
    clocks::wall_clock::add_to_linker::<S, WasiClocks>(&mut l, <S as WasiClocksView>::clocks)?;
    clocks::monotonic_clock::add_to_linker::<S, NoWaiting>(&mut l, |s| {
        NoWaitingView(<S as WasiClocksView>::clocks(s))
    })?;
    random::random::add_to_linker::<S, WasiRandom>(&mut l, |s| s.wasi.random())?;
    random::insecure::add_to_linker::<S, WasiRandom>(&mut l, |s| s.wasi.random())?;
    random::insecure_seed::add_to_linker::<S, WasiRandom>(&mut l, |s| s.wasi.random())?;
    Node::add_to_linker::<_, HasSelf<_>>(&mut l, |s| s)?;
    Ok(l)
}

fn unversioned(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

fn why_not(interface: &str) -> &'static str {
    match interface.split('/').next() {
        Some("wasi:filesystem") => "a code node has no files; use file.read and file.write nodes",
        Some("wasi:sockets" | "wasi:http") => {
            "a code node has no network; use an http.request node"
        }
        _ => "the sandbox does not grant it",
    }
}

/// The granted linker plus, for this component, a stopping function for
/// every function of every `wasi:*` interface it imports that is not
/// granted. Other unknown imports stay absent: loading refuses them and
/// names them.
pub(crate) fn linker_for(
    base: &Linker<GuestState>,
    component: &Component,
) -> wasmtime::Result<Linker<GuestState>> {
    let engine = base.engine().clone();
    let ty = component.component_type();
    let mut linker = base.clone();
    // Resource types met so far, in import order. A `use`d one (tcp's
    // `pollable`) is equal to one met before and must stay undefined:
    // defining it again would not match the granted one.
    let mut seen: Vec<ResourceType> = Vec::new();
    for (name, import) in ty.imports(&engine) {
        let ComponentItem::ComponentInstance(instance) = import.ty else {
            continue;
        };
        let iface = unversioned(name);
        let deny = iface.starts_with("wasi:") && !GRANTED.contains(&iface);
        let mut stub = if deny {
            Some(linker.instance(name)?)
        } else {
            None
        };
        for (item, export) in instance.exports(&engine) {
            match export.ty {
                ComponentItem::Resource(r) => {
                    let first = !seen.contains(&r);
                    if first {
                        seen.push(r);
                    }
                    if let (Some(stub), true) = (stub.as_mut(), first) {
                        stub.resource(item, ResourceType::host::<NotGrantedResource>(), |_, _| {
                            Ok(())
                        })?;
                    }
                }
                ComponentItem::ComponentFunc(_) => {
                    let Some(stub) = stub.as_mut() else { continue };
                    let call = format!("{iface}.{item}");
                    if call == "wasi:filesystem/preopens.get-directories" {
                        // No files, in WASI's terms: no preopened folders.
                        // Toolchains that list them at start still load;
                        // opening a file gets an error the code can see.
                        stub.func_new(item, |_, _, _, results| {
                            if let Some(r) = results.first_mut() {
                                *r = Val::List(Vec::new());
                            }
                            Ok(())
                        })?;
                    } else {
                        let why = why_not(iface);
                        stub.func_new(item, move |_, _, _, _| Err(not_granted(&call, why).into()))?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(linker)
}
