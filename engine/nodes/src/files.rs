//! `file.read` and `file.write`, confined to the folders in `[files] allow`.
//!
//! A path is checked after the operating system has resolved it: the real
//! path (every symlink followed, every `..` applied) must lie inside a real
//! allowed folder. Relative paths are relative to the first allowed folder.
//! Writes go to a temp file in the target's folder, are fsynced and renamed
//! over the target, so a reader sees the old file or the new one, never half.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::io::AsyncReadExt;

use crate::binary::{self, Data};
use sluice_model::kinds::{FileFormat, FileReadConfig, FileWriteConfig, IfExists};

use crate::{Call, Error, Outputs, Result, config, out, type_name};

/// The format asked for, else by the file's extension (`.json`, `.csv`), else text.
fn format_of(asked: Option<FileFormat>, path: &Path) -> FileFormat {
    asked.unwrap_or_else(|| {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("json") => FileFormat::Json,
            Some("csv") => FileFormat::Csv,
            _ => FileFormat::Text,
        }
    })
}

fn path_of(kind: &str, given: &str) -> Result<String> {
    match given.trim() {
        "" => Err(Error::terminal(format!("{kind}: path is empty"))),
        p => Ok(p.to_string()),
    }
}

/// The allowed folders, each resolved to its real path.
fn allowed_roots(kind: &str, allow: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if allow.is_empty() {
        return Err(Error::terminal(format!(
            "{kind}: no folders are allowed for file nodes; list them under `[files] allow` \
             in config.toml in the data dir"
        )));
    }
    let roots: Vec<PathBuf> = allow
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    if roots.is_empty() {
        return Err(Error::terminal(format!(
            "{kind}: none of the allowed folders exists ({})",
            allow
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(roots)
}

fn inside(roots: &[PathBuf], real: &Path) -> bool {
    roots.iter().any(|r| real.starts_with(r))
}

fn outside_error(kind: &str, given: &str, real: &Path) -> Error {
    Error::terminal(format!(
        "{kind}: `{given}` is outside the allowed folders (it resolves to {})",
        real.display()
    ))
}

/// The path as given, made absolute against the first allowed folder.
fn absolute(allow: &[PathBuf], given: &str) -> PathBuf {
    let p = Path::new(given);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        allow[0].join(p)
    }
}

/// Opens a file to read, then checks what was opened: the real path of
/// the open file (not of the name, which could be swapped for a symlink in
/// between) must be inside an allowed folder, and it must be a regular
/// file. Opened without blocking, so a FIFO cannot stall the open.
pub fn open_read(kind: &str, allow: &[PathBuf], given: &str) -> Result<(std::fs::File, PathBuf)> {
    let roots = allowed_roots(kind, allow)?;
    let p = absolute(allow, given);
    let not_found = |e: std::io::Error| {
        let retry = e.kind() != std::io::ErrorKind::NotFound;
        Error {
            message: format!("{kind}: `{given}`: {e}"),
            retryable: retry,
        }
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(&p).map_err(not_found)?;
    let real = opened_path(&file)
        .or_else(|| std::fs::canonicalize(&p).ok())
        .ok_or_else(|| Error::retryable(format!("{kind}: `{given}`: cannot tell its real path")))?;
    if !inside(&roots, &real) {
        return Err(outside_error(kind, given, &real));
    }
    let meta = file.metadata().map_err(not_found)?;
    if !meta.is_file() {
        return Err(Error::terminal(format!("{kind}: `{given}` is not a file")));
    }
    Ok((file, real))
}

/// The real path of an open file (Linux: `/proc/self/fd`).
fn opened_path(file: &std::fs::File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Resolves a path to read: it must exist and really be inside.
pub fn resolve_read(kind: &str, allow: &[PathBuf], given: &str) -> Result<PathBuf> {
    open_read(kind, allow, given).map(|(_, real)| real)
}

/// Resolves a folder to watch (`trigger.file`): it must exist, be a folder
/// and really be inside an allowed folder.
pub fn resolve_dir(kind: &str, allow: &[PathBuf], given: &str) -> Result<PathBuf> {
    let roots = allowed_roots(kind, allow)?;
    let p = absolute(allow, given);
    let real = std::fs::canonicalize(&p)
        .map_err(|e| Error::terminal(format!("{kind}: `{given}`: {e}")))?;
    if !inside(&roots, &real) {
        return Err(outside_error(kind, given, &real));
    }
    if !real.is_dir() {
        return Err(Error::terminal(format!(
            "{kind}: `{given}` is not a folder"
        )));
    }
    Ok(real)
}

/// Resolves a path to write: its folder must really be inside (created when
/// `create_dirs`), and an existing target may not be a symlink leading out.
pub fn resolve_write(
    kind: &str,
    allow: &[PathBuf],
    given: &str,
    create_dirs: bool,
) -> Result<PathBuf> {
    let roots = allowed_roots(kind, allow)?;
    let p = absolute(allow, given);
    let name = match p.file_name() {
        Some(n) if !matches!(p.components().next_back(), Some(Component::ParentDir)) => {
            n.to_owned()
        }
        _ => {
            return Err(Error::terminal(format!(
                "{kind}: `{given}` does not name a file"
            )));
        }
    };
    let parent = p.parent().unwrap_or(Path::new("/"));
    // The deepest folder that exists decides where we are; what is missing
    // below it is created only when asked, and may not climb with `..`.
    if parent.components().any(|c| c == Component::ParentDir) && !parent.exists() {
        return Err(Error::terminal(format!(
            "{kind}: `{given}` uses `..` in folders that do not exist"
        )));
    }
    let mut existing = parent.to_path_buf();
    let mut missing: Vec<std::ffi::OsString> = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(n), Some(up)) => {
                missing.push(n.to_owned());
                existing = up.to_path_buf();
            }
            _ => break,
        }
    }
    let real_parent = std::fs::canonicalize(&existing)
        .map_err(|e| Error::terminal(format!("{kind}: `{given}`: {e}")))?;
    if !inside(&roots, &real_parent) {
        return Err(outside_error(kind, given, &real_parent.join(&name)));
    }
    let mut dir = real_parent;
    if !missing.is_empty() {
        if !create_dirs {
            return Err(Error::terminal(format!(
                "{kind}: the folder of `{given}` does not exist (set `create_dirs: true` to create it)"
            )));
        }
        for m in missing.iter().rev() {
            dir.push(m);
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::retryable(format!("{kind}: creating {}: {e}", dir.display())))?;
        // Re-check: a concurrent symlink could have redirected the creation.
        let real = std::fs::canonicalize(&dir)
            .map_err(|e| Error::retryable(format!("{kind}: `{given}`: {e}")))?;
        if !inside(&roots, &real) {
            return Err(outside_error(kind, given, &real.join(&name)));
        }
        dir = real;
    }
    let target = dir.join(&name);
    if let Ok(meta) = std::fs::symlink_metadata(&target) {
        if meta.file_type().is_symlink() {
            let real = std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone());
            if !inside(&roots, &real) {
                return Err(outside_error(kind, given, &real));
            }
            return Err(Error::terminal(format!(
                "{kind}: `{given}` is a symlink; write to the file it points at ({})",
                real.display()
            )));
        }
        if meta.is_dir() {
            return Err(Error::terminal(format!("{kind}: `{given}` is a folder")));
        }
    }
    Ok(target)
}

async fn blocking<T: Send + 'static>(
    kind: &'static str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::retryable(format!("{kind}: {e}")))?
}

pub async fn read(call: &Call<'_>) -> Result<Outputs> {
    const KIND: &str = "file.read";
    let cfg = config::<FileReadConfig>(call)?;
    let given = path_of(KIND, &cfg.path)?;
    let settings = call.io.settings.clone();
    let g = given.clone();
    let (file, path) = blocking(KIND, move || open_read(KIND, &settings.files.allow, &g)).await?;
    let format = format_of(cfg.format, &path);
    let mut file = tokio::fs::File::from_std(file);
    let size = file
        .metadata()
        .await
        .map_err(|e| Error::retryable(format!("{KIND}: `{given}`: {e}")))?
        .len();
    let io_err = |e: std::io::Error| Error::retryable(format!("{KIND}: `{given}`: {e}"));
    let content = if format == FileFormat::Bytes {
        let inline = call.io.settings.http.inline_bytes;
        if size <= inline {
            let mut buf = Vec::with_capacity(size as usize);
            file.read_to_end(&mut buf).await.map_err(io_err)?;
            binary::inline(&buf, None)
        } else {
            let mut w = call.host.blob_writer()?;
            let mut buf = vec![0u8; 256 << 10];
            loop {
                let n = file.read(&mut buf).await.map_err(io_err)?;
                if n == 0 {
                    break;
                }
                w.write(&buf[..n])?;
            }
            let (hash, size) = w.finish()?;
            binary::blob_ref(&hash, size, None)
        }
    } else {
        let limit = call.io.settings.files.max_read_bytes;
        if size > limit {
            return Err(Error::terminal(format!(
                "{KIND}: `{given}` is {size} bytes, more than files.max_read_bytes ({limit}); \
                 read it with format `bytes`"
            )));
        }
        let mut buf = Vec::with_capacity(size as usize);
        (&mut file)
            .take(limit + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(io_err)?;
        let text = String::from_utf8(buf).map_err(|e| {
            Error::terminal(format!(
                "{KIND}: `{given}` is not UTF-8 text (byte {}); read it with format `bytes`",
                e.utf8_error().valid_up_to()
            ))
        })?;
        match format {
            FileFormat::Json => serde_json::from_str(&text).map_err(|e| {
                Error::terminal(format!(
                    "{KIND}: `{given}` is not valid JSON (line {}, column {}): {e}",
                    e.line(),
                    e.column()
                ))
            })?,
            FileFormat::Csv => csv_to_json(&text)
                .map_err(|e| Error::terminal(format!("{KIND}: `{given}` is not valid CSV: {e}")))?,
            _ => Value::String(text),
        }
    };
    out(Arc::new(json!({
        "path": path.display().to_string(),
        "size": size,
        "content": content,
    })))
}

/// CSV with a header row → an array of objects (values stay strings).
fn csv_to_json(text: &str) -> std::result::Result<Value, csv::Error> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(false)
        .from_reader(text.as_bytes());
    let headers = reader.headers()?.clone();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record?;
        let row: Map<String, Value> = headers
            .iter()
            .zip(record.iter())
            .map(|(h, v)| (h.to_string(), Value::String(v.to_string())))
            .collect();
        rows.push(Value::Object(row));
    }
    Ok(Value::Array(rows))
}

/// An array of objects → CSV; the columns are every key, in first-seen order.
fn json_to_csv(kind: &str, v: &Value) -> Result<Vec<u8>> {
    let Value::Array(rows) = v else {
        return Err(Error::terminal(format!(
            "{kind}: CSV content must be an array of objects, got {}",
            type_name(v)
        )));
    };
    let mut columns: Vec<&str> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Value::Object(m) = row else {
            return Err(Error::terminal(format!(
                "{kind}: CSV row {i} must be an object, got {}",
                type_name(row)
            )));
        };
        for k in m.keys() {
            if !columns.contains(&k.as_str()) {
                columns.push(k);
            }
        }
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    let err = |e: csv::Error| Error::terminal(format!("{kind}: {e}"));
    w.write_record(&columns).map_err(err)?;
    for row in rows {
        let record: Vec<String> = columns
            .iter()
            .map(|c| match row.get(*c) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            })
            .collect();
        w.write_record(&record).map_err(err)?;
    }
    w.into_inner()
        .map_err(|e| Error::terminal(format!("{kind}: {e}")))
}

pub async fn write(call: &Call<'_>) -> Result<Outputs> {
    const KIND: &str = "file.write";
    let cfg = config::<FileWriteConfig>(call)?;
    let given = path_of(KIND, &cfg.path)?;
    let create_dirs = cfg.create_dirs;
    let overwrite = cfg.if_exists == IfExists::Overwrite;
    let content = match cfg.content {
        Some(v) => v,
        None => (*call.scope.input).clone(),
    };
    let format = format_of(cfg.format, Path::new(&given));
    let data = match format {
        FileFormat::Text => Data::Bytes(match content {
            Value::String(s) => s.into_bytes(),
            other => {
                return Err(Error::terminal(format!(
                    "{KIND}: text content must be a string, got {} (use format `json`)",
                    type_name(&other)
                )));
            }
        }),
        FileFormat::Json => {
            let mut text = serde_json::to_vec_pretty(&content)
                .map_err(|e| Error::terminal(format!("{KIND}: {e}")))?;
            text.push(b'\n');
            Data::Bytes(text)
        }
        FileFormat::Csv => Data::Bytes(json_to_csv(KIND, &content)?),
        FileFormat::Bytes => {
            binary::data_of(&content, call.host, true, &format!("{KIND}: content"))?
        }
    };
    let settings = call.io.settings.clone();
    let g = given.clone();
    let (path, size) = blocking(KIND, move || {
        let target = resolve_write(KIND, &settings.files.allow, &g, create_dirs)?;
        let size = atomic_write(&target, data, overwrite)
            .map_err(|e| e.with_prefix(&format!("{KIND}: `{g}`")))?;
        Ok((target, size))
    })
    .await?;
    out(Arc::new(
        json!({"path": path.display().to_string(), "size": size}),
    ))
}

/// Temp file beside the target, fsync, rename, fsync the folder.
fn atomic_write(target: &Path, data: Data, overwrite: bool) -> Result<u64> {
    let dir = target.parent().unwrap_or(Path::new("/"));
    let io = |e: std::io::Error| Error {
        retryable: e.kind() != std::io::ErrorKind::PermissionDenied,
        message: e.to_string(),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".sluice-write-");
    // A new file gets the usual mode (0666 less the umask), not the
    // temp file's private 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(io)?;
    let size = match data {
        Data::Bytes(b) => {
            tmp.write_all(&b).map_err(io)?;
            b.len() as u64
        }
        Data::File { path, .. } => {
            let mut src = std::fs::File::open(&path).map_err(io)?;
            std::io::copy(&mut src, tmp.as_file_mut()).map_err(io)?
        }
    };
    // Keep the mode of a file being replaced (a script stays executable).
    if let Ok(meta) = std::fs::metadata(target) {
        tmp.as_file().set_permissions(meta.permissions()).ok();
    }
    tmp.as_file().sync_all().map_err(io)?;
    if overwrite {
        tmp.persist(target).map_err(|e| io(e.error))?;
    } else {
        tmp.persist_noclobber(target).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                Error::terminal("the file exists and if_exists is `fail`")
            } else {
                io(e.error)
            }
        })?;
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_through_objects() {
        let v = csv_to_json("name,qty\nann,3\n\"b, c\",4\n").unwrap();
        assert_eq!(
            v,
            json!([{"name": "ann", "qty": "3"}, {"name": "b, c", "qty": "4"}])
        );
        let text = json_to_csv("t", &json!([{"a": 1, "b": "x"}, {"b": "y,z", "c": null}])).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "a,b,c\n1,x,\n,\"y,z\",\n");
    }

    /// What is read is what was checked: while another thread swaps the
    /// name between a file inside and a symlink to a secret outside, no
    /// read ever returns the secret (checking the name and opening it
    /// afterwards let a swap in between through). A FIFO is refused at
    /// once, not waited on.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_name_swapped_for_a_symlink_never_reads_outside() {
        use std::io::Read;
        use std::sync::atomic::{AtomicBool, Ordering};
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("in");
        std::fs::create_dir_all(&allowed).unwrap();
        let secret = root.path().join("secret.txt");
        std::fs::write(&secret, "SECRET").unwrap();
        let (inside, link) = (allowed.join("inside.tmp"), allowed.join("link.tmp"));
        let name = allowed.join("target");
        std::fs::write(&name, "fine").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            let (name, inside, link, secret) =
                (name.clone(), inside.clone(), link.clone(), secret.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::fs::write(&inside, "fine").unwrap();
                    std::fs::rename(&inside, &name).unwrap();
                    let _ = std::fs::remove_file(&link);
                    std::os::unix::fs::symlink(&secret, &link).unwrap();
                    std::fs::rename(&link, &name).unwrap();
                }
            })
        };
        let allow = vec![allowed.clone()];
        let (mut read, mut refused) = (0, 0);
        for _ in 0..5_000 {
            match open_read("file.read", &allow, "target") {
                Ok((mut file, _)) => {
                    let mut text = String::new();
                    file.read_to_string(&mut text).unwrap();
                    assert_eq!(text, "fine", "read outside the allowed folder");
                    read += 1;
                }
                Err(_) => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(
            read > 0 && refused > 0,
            "the swap was not exercised: {read} read, {refused} refused"
        );

        let fifo = allowed.join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let t = std::time::Instant::now();
        let e = open_read("file.read", &allow, "pipe").unwrap_err();
        assert!(e.message.contains("is not a file"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn paths_outside_or_through_symlinks_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("in");
        let other = root.path().join("out");
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("secret.txt"), "x").unwrap();
        std::fs::write(allowed.join("ok.txt"), "x").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&other, allowed.join("link")).unwrap();
            std::os::unix::fs::symlink(other.join("secret.txt"), allowed.join("file-link"))
                .unwrap();
        }
        let allow = vec![allowed.clone()];
        assert!(resolve_read("file.read", &allow, "ok.txt").is_ok());
        for bad in [
            "../out/secret.txt",
            other.join("secret.txt").to_str().unwrap(),
            "link/secret.txt",
            "file-link",
        ] {
            let e = resolve_read("file.read", &allow, bad).unwrap_err();
            assert!(
                e.message.contains("outside the allowed folders"),
                "{bad}: {e}"
            );
            let e = resolve_write("file.write", &allow, bad, true).unwrap_err();
            assert!(
                e.message.contains("outside the allowed folders"),
                "{bad}: {e}"
            );
        }
        assert!(
            resolve_write("file.write", &allow, "new/deeper/x.txt", false)
                .unwrap_err()
                .message
                .contains("create_dirs")
        );
        let made = resolve_write("file.write", &allow, "new/deeper/x.txt", true).unwrap();
        assert!(made.starts_with(std::fs::canonicalize(&allowed).unwrap()));
        assert!(
            resolve_write("file.write", &allow, "nope/../../out/y.txt", true)
                .unwrap_err()
                .message
                .contains("..")
        );
        let e = resolve_read("file.read", &[], "ok.txt").unwrap_err();
        assert!(e.message.contains("[files] allow"), "{e}");
    }
}
