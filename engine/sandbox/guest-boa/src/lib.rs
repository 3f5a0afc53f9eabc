//! Boa behind guest-js's interface (`wizer-initialize`, `sluice_alloc`,
//! `sluice_run` answering `o` + JSON or `e` + an error object), for the
//! engine comparison only. Built for wasm32-wasip1 (Boa needs a source of
//! randomness and time); the benchmark host answers its WASI imports with
//! zeros.

use std::cell::RefCell;

use boa_engine::{Context, JsValue, Source};

thread_local! {
    static JS: RefCell<Option<Context>> = const { RefCell::new(None) };
    static ANSWER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

#[unsafe(export_name = "wizer-initialize")]
pub extern "C" fn initialize() {
    JS.with(|js| *js.borrow_mut() = Some(Context::default()));
}

#[unsafe(no_mangle)]
pub extern "C" fn sluice_alloc(len: usize) -> *mut u8 {
    let mut buf = Vec::<u8>::with_capacity(len.max(1));
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr
}

/// # Safety
/// The host wrote both ranges through `sluice_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_run(
    source: *const u8,
    source_len: usize,
    input: *const u8,
    input_len: usize,
    _seed: u64,
) -> u64 {
    let (source, input) = unsafe {
        (
            std::slice::from_raw_parts(source, source_len),
            std::slice::from_raw_parts(input, input_len),
        )
    };
    // Without a snapshot, every instance starts the engine itself.
    if JS.with(|js| js.borrow().is_none()) {
        initialize();
    }
    let answer = JS.with(|js| {
        let mut js = js.borrow_mut();
        let ctx = js.as_mut().expect("initialized");
        match run(ctx, source, input) {
            Ok(json) => [b"o".as_slice(), json.as_bytes()].concat(),
            Err(message) => {
                let error = serde_json::json!({"name": "Error", "message": message});
                [b"e".as_slice(), error.to_string().as_bytes()].concat()
            }
        }
    });
    ANSWER.with(|a| {
        let mut a = a.borrow_mut();
        *a = answer;
        ((a.as_ptr() as u64) << 32) | a.len() as u64
    })
}

fn run(ctx: &mut Context, source: &[u8], input: &[u8]) -> Result<String, String> {
    let input: serde_json::Value = serde_json::from_slice(input).map_err(|e| e.to_string())?;
    let mut text = b"(function (input) {\n".to_vec();
    text.extend_from_slice(source);
    text.extend_from_slice(b"\n})");
    let f = ctx
        .eval(Source::from_bytes(&text))
        .map_err(|e| e.to_string())?;
    let f = f.as_callable().ok_or("not a function")?;
    let input = JsValue::from_json(&input, ctx).map_err(|e| e.to_string())?;
    let out = f
        .call(&JsValue::undefined(), &[input], ctx)
        .map_err(|e| e.to_string())?;
    let json = out.to_json(ctx).map_err(|e| e.to_string())?;
    Ok(json.map_or_else(|| "null".into(), |v| v.to_string()))
}
