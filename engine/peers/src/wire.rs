//! The frames of `sluice/doc/1`: one bidirectional QUIC stream per joined
//! workflow, each frame a big-endian `u32` length and that many bytes of
//! postcard. Lengths are checked before anything is read and buffers grow
//! only as bytes arrive, so a peer that announces 4 GiB and sends nothing
//! costs nothing.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The ALPN of the document protocol.
pub const ALPN: &[u8] = b"sluice/doc/1";

/// The largest frame once a peer is in (a whole document's updates).
pub const MAX_FRAME: u32 = 32 << 20;

/// The largest frame before a peer is in (its hello).
pub const MAX_HELLO: u32 = 16 << 10;

/// One message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// Joiner → sharer, first: which workflow, the share's secret (to
    /// join; ignored once the peer holds a grant), who it is and the
    /// version vector of its copy (empty: none yet).
    Hello {
        workflow: String,
        share: String,
        secret: Vec<u8>,
        name: String,
        version: Vec<u8>,
    },
    /// Sharer → joiner: let in. Everything the joiner lacks, the sharer's
    /// version vector (the joiner answers with what the sharer lacks) and
    /// everyone's presence.
    Welcome {
        role: String,
        name: String,
        update: Vec<u8>,
        version: Vec<u8>,
        presence: Vec<u8>,
    },
    /// Sharer → joiner: not let in, and why. The connection closes.
    Refused {
        reason: String,
    },
    /// Either way: Loro updates. A non-zero `seq` asks for an [`Frame::Ack`]
    /// (or a [`Frame::Rejected`]) once the other side has them durably.
    Update {
        seq: u64,
        bytes: Vec<u8>,
    },
    Ack {
        seq: u64,
    },
    Rejected {
        seq: u64,
        reason: String,
    },
    /// Either way: presence (Loro ephemeral store update).
    Presence {
        bytes: Vec<u8>,
    },
}

/// Why reading or writing a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame of {len} bytes is over the limit of {max}")]
    TooLong { len: u32, max: u32 },
    #[error("malformed frame: {0}")]
    Malformed(#[from] postcard::Error),
    #[error("stream: {0}")]
    Io(#[from] std::io::Error),
    #[error("the stream ended")]
    Closed,
}

/// Reads one frame of at most `max` bytes. `Closed` when the stream ends
/// cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: u32) -> Result<Frame, WireError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(WireError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len);
    if len > max {
        return Err(WireError::TooLong { len, max });
    }
    // Grows as bytes arrive, not to what the peer announced.
    let mut buf = Vec::with_capacity((len as usize).min(64 << 10));
    let read = r.take(u64::from(len)).read_to_end(&mut buf).await?;
    if read != len as usize {
        return Err(WireError::Closed);
    }
    Ok(postcard::from_bytes(&buf)?)
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> Result<(), WireError> {
    let body = postcard::to_stdvec(frame)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or(WireError::TooLong {
            len: u32::try_from(body.len()).unwrap_or(u32::MAX),
            max: MAX_FRAME,
        })?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's body (`fuzz/fuzz_targets/peer_frames.rs`), run here
    /// on random and mutated inputs: frames read off a stream, their
    /// updates merged into a document, never a panic.
    #[tokio::test]
    async fn random_and_mutated_frames_never_panic() {
        use sluice_model::doc::WorkflowDoc;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // A real update to mutate.
        let wf = sluice_model::Workflow::from_json(
            r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [{"id": "t", "kind": "trigger.manual"}], "edges": []}"#,
        )
        .unwrap();
        let doc = WorkflowDoc::from_workflow(&wf, 7).unwrap();
        let valid = postcard::to_stdvec(&Frame::Update {
            seq: 1,
            bytes: doc.updates_since(&Default::default()).unwrap(),
        })
        .unwrap();
        let mut merged = 0;
        for i in 0..3000 {
            let mut body = if i % 2 == 0 {
                let len = (next() % 300) as usize;
                (0..len).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                let mut v = valid.clone();
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % v.len();
                    v[at] = next() as u8;
                }
                v
            };
            if i % 7 == 0 {
                body.truncate((next() as usize) % (body.len() + 1));
            }
            let mut input = (body.len() as u32).to_be_bytes().to_vec();
            input.extend_from_slice(&body);
            let mut r = input.as_slice();
            if let Ok(Frame::Update { bytes, .. }) = read_frame(&mut r, MAX_FRAME).await {
                let d = WorkflowDoc::new();
                if d.import(&bytes).is_ok() {
                    merged += 1;
                    let _ = d.to_workflow();
                }
            }
            let _ = crate::Ticket::decode(&String::from_utf8_lossy(&body));
        }
        // Some mutations still decode and merge: the corpus reaches the merge.
        assert!(merged > 0);
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let f = Frame::Update {
            seq: 7,
            bytes: vec![1, 2, 3],
        };
        write_frame(&mut a, &f).await.unwrap();
        assert_eq!(read_frame(&mut b, MAX_FRAME).await.unwrap(), f);

        // A length over the limit is refused before anything is read.
        a.write_all(&(MAX_HELLO + 1).to_be_bytes()).await.unwrap();
        assert!(matches!(
            read_frame(&mut b, MAX_HELLO).await,
            Err(WireError::TooLong { .. })
        ));

        // Garbage of the announced length is malformed, not a panic.
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        a.write_all(&5u32.to_be_bytes()).await.unwrap();
        a.write_all(&[0xff; 5]).await.unwrap();
        assert!(matches!(
            read_frame(&mut b, MAX_FRAME).await,
            Err(WireError::Malformed(_))
        ));

        // A frame cut short is the stream ending.
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        a.write_all(&100u32.to_be_bytes()).await.unwrap();
        a.write_all(&[0; 10]).await.unwrap();
        drop(a);
        assert!(matches!(
            read_frame(&mut b, MAX_FRAME).await,
            Err(WireError::Closed)
        ));
    }
}
