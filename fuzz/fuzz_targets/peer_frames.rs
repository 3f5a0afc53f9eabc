//! What a connected peer can send, as bytes: frames read off the stream,
//! tickets pasted in, and Loro updates merged into a workflow document.
//! None of it may panic; sizes are bounded before anything is allocated.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_model::doc::WorkflowDoc;
use sluice_peers::wire::{Frame, MAX_FRAME, read_frame};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut r = data;
        while let Ok(frame) = read_frame(&mut r, MAX_FRAME).await {
            if let Frame::Update { bytes, .. } | Frame::Welcome { update: bytes, .. } = frame {
                let doc = WorkflowDoc::new();
                if doc.import(&bytes).is_ok() {
                    let _ = doc.to_workflow();
                }
            }
        }
    });
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = sluice_peers::Ticket::decode(text);
    }
});
