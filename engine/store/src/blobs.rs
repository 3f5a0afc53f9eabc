//! Content-addressed blob store for large JSON values, and [`Stored`], the
//! form a value takes on its way into the database.
//!
//! A blob is the serialized JSON text of a value, named by the hex blake3 hash
//! of that text: `<dir>/<2 hex>/<62 hex>`. Blobs are written to `<dir>/tmp`
//! first, fsynced and renamed into place, so a blob path never holds a partial
//! file, and equal values share one file.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tempfile::NamedTempFile;

use crate::journal::Health;
use crate::{Error, Result};

/// Values whose serialized text is shorter than this are stored inline, in
/// their row: committed with the journal's batch (one fsync for many runs),
/// where a blob costs a file and two fsyncs of its own. A 64 KiB webhook
/// body stays inline; bigger values stream to blobs, never held whole.
pub const INLINE_LIMIT: usize = 1024 * 1024;

/// Once spilled to a file, bytes are hashed and written in chunks this big.
const CHUNK: usize = 256 * 1024;

/// Temp files older than this at open are leftovers of a crash.
const STALE_TMP: Duration = Duration::from_secs(60 * 60);

/// A JSON value ready to store.
///
/// `Inline` and `Blob` are built by writers (with [`Blobs::store_value`], in
/// the caller's task, so serialization runs in parallel and never in the
/// journal writer); `Loaded` is what reads return.
#[derive(Clone, Debug)]
pub enum Stored {
    /// Serialized JSON text shorter than [`INLINE_LIMIT`].
    Inline(String),
    /// Hex blake3 hash of a blob holding the serialized JSON text.
    Blob(String),
    /// A value read back from the store, blob references resolved.
    Loaded(Arc<Value>),
    /// A value journaled before in the same run, not stored again: a
    /// step's input that is the run's input or an earlier step's output.
    /// Journal columns only; read back as `Loaded`.
    Ref(ValueRef),
    /// Step outputs (`[[port, value], ...]`) whose every value was journaled
    /// before in the same run (a trigger's output is the run's input; an
    /// `if` passes its input on). Journal columns only; read back as `Loaded`.
    Refs(Vec<(String, ValueRef)>),
}

/// Where in a run a value was journaled first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueRef {
    /// The run's input (`runs.input`).
    RunInput,
    /// Output `port` of the journal record `seq` of the same run.
    Output { seq: u64, port: String },
}

impl Stored {
    /// The value, when it is at hand: `Loaded` as is, `Inline` parsed (`None`
    /// if the text is not valid JSON), `Blob` never (use [`Blobs::resolve`]).
    pub fn value(&self) -> Option<Arc<Value>> {
        match self {
            Stored::Loaded(v) => Some(v.clone()),
            Stored::Inline(text) => serde_json::from_str(text).ok().map(Arc::new),
            Stored::Blob(_) | Stored::Ref(_) | Stored::Refs(_) => None,
        }
    }
}

/// The blob store under `<data dir>/blobs`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Blobs {
    inner: Arc<Dirs>,
}

#[derive(Debug)]
struct Dirs {
    dir: PathBuf,
    tmp: PathBuf,
    /// Shared with the journal writer: a blob the disk had no room for
    /// makes the engine refuse new runs as a failed commit does.
    health: Arc<Health>,
}

impl Blobs {
    /// Opens (creating) the blob store in `dir` and removes stale temp files.
    pub(crate) fn open(dir: PathBuf) -> Result<Blobs> {
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).map_err(Error::io(&tmp))?;
        remove_stale_temps(&tmp);
        Ok(Blobs {
            inner: Arc::new(Dirs {
                dir,
                tmp,
                health: Arc::default(),
            }),
        })
    }

    pub(crate) fn health(&self) -> Arc<Health> {
        self.inner.health.clone()
    }

    /// Notes a write that failed for want of storage (see [`Health`]).
    fn watch<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(Error::Io { source, .. }) = &r {
            self.inner.health.blob_failed(source);
        }
        r
    }

    /// After a blob write failed for want of storage: whether a 64 KiB file
    /// can be written and synced in the blob store now (clearing the
    /// failure if so). Nothing to do otherwise.
    pub(crate) fn probe_if_failing(&self) -> Result<()> {
        let failing = self.inner.health.failure().is_some();
        if !failing {
            return Ok(());
        }
        let tmp = &self.inner.tmp;
        let written = (|| -> io::Result<()> {
            let mut f = tempfile::Builder::new().prefix("probe-").tempfile_in(tmp)?;
            f.write_all(&[0u8; 64 * 1024])?;
            f.as_file().sync_all()
        })();
        match written {
            Ok(()) => {
                self.inner.health.blob_written();
                Ok(())
            }
            Err(source) => self.watch(Err(Error::Io {
                path: tmp.clone(),
                source,
            })),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Serializes `v`: inline when the text is shorter than [`INLINE_LIMIT`],
    /// otherwise streamed into a blob file while hashing, so a large value is
    /// never held in memory as text. Blocking: run big values on
    /// `spawn_blocking`.
    pub fn store_value<T: serde::Serialize + ?Sized>(&self, v: &T) -> Result<Stored> {
        let mut spill = Spill {
            blobs: self,
            // Most values are a message of some hundred bytes: one
            // allocation instead of a doubling from 8.
            buf: Vec::with_capacity(512),
            file: None,
            failed: None,
        };
        if let Err(e) = serde_json::to_writer(&mut spill, v) {
            let e = spill.failed.take().unwrap_or(Error::Serialize(e));
            return self.watch(Err(e));
        }
        let stored = spill.finish();
        self.watch(stored)
    }

    /// Reads a blob back, checking its hash. Refuses anything that is not 64
    /// lowercase hex characters, so a hash is never a path.
    pub fn load_value(&self, hash: &str) -> Result<Value> {
        check_hash(hash)?;
        let path = self.path_of(hash);
        let file = File::open(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::BlobMissing(hash.to_owned()),
            _ => Error::Io {
                path: path.clone(),
                source: e,
            },
        })?;
        // serde_json reads byte by byte: buffer outside the hasher so the
        // hasher sees large reads.
        let mut reader = BufReader::with_capacity(
            CHUNK,
            HashingReader {
                inner: file,
                hasher: blake3::Hasher::new(),
            },
        );
        let value: Value = serde_json::from_reader(&mut reader).map_err(|e| {
            if e.is_io() {
                Error::Io {
                    path: path.clone(),
                    source: e.into(),
                }
            } else {
                Error::BlobCorrupt {
                    hash: hash.to_owned(),
                    detail: e.to_string(),
                }
            }
        })?;
        // from_reader reads to EOF (it checks for trailing characters), so
        // the hasher has seen the whole file.
        let actual = reader.into_inner().hasher.finalize().to_hex();
        if actual.as_str() != hash {
            return Err(Error::BlobCorrupt {
                hash: hash.to_owned(),
                detail: format!("content hashes to {actual}"),
            });
        }
        Ok(value)
    }

    /// The value behind any [`Stored`]: parses inline text, loads blobs.
    pub fn resolve(&self, stored: &Stored) -> Result<Arc<Value>> {
        match stored {
            Stored::Loaded(v) => Ok(v.clone()),
            Stored::Inline(text) => serde_json::from_str(text)
                .map(Arc::new)
                .map_err(Error::InvalidJson),
            Stored::Blob(hash) => self.load_value(hash).map(Arc::new),
            Stored::Ref(_) | Stored::Refs(_) => Err(Error::UnresolvedRef),
        }
    }

    /// Starts a blob of raw bytes (a downloaded file, say), hashed as it is
    /// written. Nothing is visible under the hash until [`BytesWriter::finish`].
    pub fn bytes_writer(&self) -> Result<BytesWriter> {
        let tmp = self.watch(
            tempfile::Builder::new()
                .prefix("blob-")
                .tempfile_in(&self.inner.tmp)
                .map_err(Error::io(&self.inner.tmp)),
        )?;
        Ok(BytesWriter {
            blobs: self.clone(),
            tmp,
            hasher: blake3::Hasher::new(),
            size: 0,
        })
    }

    /// The file of an existing blob. Refuses anything that is not a hash.
    pub fn blob_path(&self, hash: &str) -> Result<PathBuf> {
        check_hash(hash)?;
        let path = self.path_of(hash);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::BlobMissing(hash.to_owned()))
        }
    }

    /// Every blob file last stored before `cutoff`: hash, path, size.
    pub(crate) fn files_older_than(
        &self,
        cutoff: SystemTime,
    ) -> Result<Vec<(String, PathBuf, u64)>> {
        let mut out = Vec::new();
        self.each_file(|hash, path, meta| {
            if meta.modified().is_ok_and(|m| m < cutoff) {
                out.push((hash, path, meta.len()));
            }
        })?;
        Ok(out)
    }

    /// How many blob files there are, and their bytes.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let (mut count, mut bytes) = (0, 0);
        let walked = self.each_file(|_, _, meta| {
            count += 1;
            bytes += meta.len();
        });
        if let Err(e) = walked {
            tracing::warn!(error = %e, "reading the blob store");
        }
        (count, bytes)
    }

    fn each_file(&self, mut f: impl FnMut(String, PathBuf, fs::Metadata)) -> Result<()> {
        let dir = &self.inner.dir;
        for shard in fs::read_dir(dir).map_err(Error::io(dir))? {
            let shard = shard.map_err(Error::io(dir))?;
            let name = shard.file_name();
            let Some(prefix) = name.to_str().filter(|n| n.len() == 2) else {
                continue; // tmp/
            };
            let path = shard.path();
            for file in fs::read_dir(&path).map_err(Error::io(&path))? {
                let file = file.map_err(Error::io(&path))?;
                let Some(rest) = file.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let hash = format!("{prefix}{rest}");
                if check_hash(&hash).is_err() {
                    continue;
                }
                if let Ok(meta) = file.metadata() {
                    f(hash, file.path(), meta);
                }
            }
        }
        Ok(())
    }

    fn path_of(&self, hash: &str) -> PathBuf {
        let (shard, rest) = hash.split_at(2);
        self.inner.dir.join(shard).join(rest)
    }

    /// Moves a finished temp file into place (or drops it when the blob
    /// already exists) and makes the new name durable.
    fn install(&self, tmp: NamedTempFile, hash: &str) -> Result<()> {
        let path = self.path_of(hash);
        if path.exists() {
            // Stored again: the blob is in use now, whatever its age, so
            // the collector's grace starts again (`store/retention.rs`).
            touch(&path);
            return Ok(()); // dropping `tmp` deletes it
        }
        let shard = path.parent().unwrap_or(&self.inner.dir);
        let new_shard = !shard.exists();
        if new_shard {
            fs::create_dir_all(shard).map_err(Error::io(shard))?;
        }
        if let Err(e) = tmp.persist(&path) {
            // A concurrent writer of the same content may have won the race
            // (or holds the file open on Windows): its file is as good.
            if !path.exists() {
                return Err(Error::Io {
                    path,
                    source: e.error,
                });
            }
            return Ok(());
        }
        sync_dir(shard)?;
        if new_shard {
            sync_dir(&self.inner.dir)?;
        }
        self.inner.health.blob_written();
        Ok(())
    }
}

/// Sets a blob's modification time to now (best effort: a blob whose time
/// cannot be set is at worst collected after its grace, as if unused).
fn touch(path: &Path) {
    let set = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = set {
        tracing::warn!(path = %path.display(), error = %e, "cannot refresh a blob's time");
    }
}

/// A raw-bytes blob being written (see [`Blobs::bytes_writer`]). Dropped
/// unfinished, it leaves nothing behind.
pub struct BytesWriter {
    blobs: Blobs,
    tmp: NamedTempFile,
    hasher: blake3::Hasher,
    size: u64,
}

impl std::fmt::Debug for BytesWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BytesWriter")
            .field("size", &self.size)
            .finish()
    }
}

impl BytesWriter {
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        let written = self
            .tmp
            .write_all(bytes)
            .map_err(Error::io(self.tmp.path()));
        self.blobs.watch(written)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Fsyncs and installs the blob; returns its hash and size.
    pub fn finish(self) -> Result<(String, u64)> {
        let synced = self
            .tmp
            .as_file()
            .sync_all()
            .map_err(Error::io(self.tmp.path()));
        self.blobs.watch(synced)?;
        let hash = self.hasher.finalize().to_hex().to_string();
        let installed = self.blobs.install(self.tmp, &hash);
        self.blobs.watch(installed)?;
        Ok((hash, self.size))
    }
}

/// A writer that buffers up to [`INLINE_LIMIT`] bytes and then spills to a
/// temp file, hashing as it goes.
struct Spill<'a> {
    blobs: &'a Blobs,
    buf: Vec<u8>,
    file: Option<(NamedTempFile, blake3::Hasher)>,
    /// The real error behind an `io::Error` handed to serde_json.
    failed: Option<Error>,
}

impl Spill<'_> {
    fn start_file(&mut self) -> Result<()> {
        let tmp = tempfile::Builder::new()
            .prefix("blob-")
            .tempfile_in(&self.blobs.inner.tmp)
            .map_err(Error::io(&self.blobs.inner.tmp))?;
        self.file = Some((tmp, blake3::Hasher::new()));
        self.write_out()
    }

    /// Hashes and writes the buffered bytes to the temp file.
    fn write_out(&mut self) -> Result<()> {
        if let Some((tmp, hasher)) = &mut self.file {
            hasher.update(&self.buf);
            tmp.write_all(&self.buf).map_err(Error::io(tmp.path()))?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Stored> {
        let Some((mut tmp, mut hasher)) = self.file.take() else {
            let text = String::from_utf8(std::mem::take(&mut self.buf)).map_err(|e| {
                Error::Serialize(serde_json::Error::io(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e,
                )))
            })?;
            return Ok(Stored::Inline(text));
        };
        hasher.update(&self.buf);
        tmp.write_all(&self.buf).map_err(Error::io(tmp.path()))?;
        tmp.as_file().sync_all().map_err(Error::io(tmp.path()))?;
        let hash = hasher.finalize().to_hex().to_string();
        self.blobs.install(tmp, &hash)?;
        Ok(Stored::Blob(hash))
    }

    fn accept(&mut self, data: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(data);
        if self.file.is_none() {
            if self.buf.len() >= INLINE_LIMIT {
                self.start_file()?;
            }
        } else if self.buf.len() >= CHUNK {
            self.write_out()?;
        }
        Ok(())
    }
}

impl Write for Spill<'_> {
    /// serde_json writes a value in pieces of a few bytes (a quote, a key,
    /// a comma), some hundred per message: each piece that still fits
    /// inline is only appended here, without going through `accept`.
    #[inline]
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        if self.file.is_none() && self.buf.len() + data.len() < INLINE_LIMIT {
            self.buf.extend_from_slice(data);
            return Ok(());
        }
        let mut rest = data;
        while !rest.is_empty() {
            let n = self.write(rest)?;
            rest = &rest[n..];
        }
        Ok(())
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self.accept(data) {
            Ok(()) => Ok(data.len()),
            Err(e) => {
                self.failed = Some(e);
                Err(io::Error::other("blob write failed"))
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct HashingReader<R> {
    inner: R,
    hasher: blake3::Hasher,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

pub(crate) fn check_hash(hash: &str) -> Result<()> {
    let ok = hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidHash(hash.chars().take(80).collect()))
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io(dir))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    // Directories cannot be opened as files here; rename is durable enough.
    Ok(())
}

/// Best effort: a failure here only leaves garbage behind, so it is logged.
fn remove_stale_temps(tmp: &Path) {
    let entries = match fs::read_dir(tmp) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(dir = %tmp.display(), error = %e, "cannot list blob temp dir");
            return;
        }
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_TMP);
        if stale && let Err(e) = fs::remove_file(entry.path()) {
            tracing::warn!(path = %entry.path().display(), error = %e, "cannot remove stale blob temp file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blobs() -> (tempfile::TempDir, Blobs) {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::open(dir.path().join("blobs")).expect("open");
        (dir, blobs)
    }

    fn text_of_len(n: usize) -> Value {
        // `"` + n-2 chars + `"` serializes to exactly n bytes.
        Value::String("x".repeat(n - 2))
    }

    #[test]
    fn inline_limit_is_exclusive() {
        let (_dir, blobs) = blobs();
        let below = blobs
            .store_value(&text_of_len(INLINE_LIMIT - 1))
            .expect("store");
        assert!(matches!(below, Stored::Inline(ref t) if t.len() == INLINE_LIMIT - 1));
        let at = blobs
            .store_value(&text_of_len(INLINE_LIMIT))
            .expect("store");
        let Stored::Blob(hash) = at else {
            panic!("expected a blob, got {at:?}");
        };
        assert_eq!(
            blobs.load_value(&hash).expect("load"),
            text_of_len(INLINE_LIMIT)
        );
    }

    #[test]
    fn small_values_round_trip_inline() {
        let (_dir, blobs) = blobs();
        let v = json!({"a": [1, 2, {"b": null}], "c": "d"});
        let stored = blobs.store_value(&v).expect("store");
        assert!(matches!(stored, Stored::Inline(_)));
        assert_eq!(stored.value().as_deref(), Some(&v));
        assert_eq!(*blobs.resolve(&stored).expect("resolve"), v);
    }

    #[test]
    fn hash_must_be_lowercase_hex() {
        let (_dir, blobs) = blobs();
        for bad in [
            "../etc/passwd",
            "",
            "ab",
            &"A".repeat(64),
            &"g".repeat(64),
            &"a".repeat(65),
        ] {
            assert!(
                matches!(blobs.load_value(bad), Err(Error::InvalidHash(_))),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            blobs.load_value(&"a".repeat(64)),
            Err(Error::BlobMissing(_))
        ));
    }

    #[test]
    fn tampered_blob_is_reported_corrupt() {
        let (_dir, blobs) = blobs();
        let v = text_of_len(INLINE_LIMIT + 100);
        let Stored::Blob(hash) = blobs.store_value(&v).expect("store") else {
            panic!("expected a blob");
        };
        let path = blobs.path_of(&hash);
        fs::write(&path, "\"tampered\"").expect("write");
        assert!(matches!(
            blobs.load_value(&hash),
            Err(Error::BlobCorrupt { .. })
        ));
    }

    #[test]
    fn no_temp_files_left_behind() {
        let (_dir, blobs) = blobs();
        let v = text_of_len(200_000);
        for _ in 0..3 {
            blobs.store_value(&v).expect("store");
        }
        let left = fs::read_dir(&blobs.inner.tmp).expect("read_dir").count();
        assert_eq!(left, 0);
    }
}
