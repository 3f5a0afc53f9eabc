//! The journal writer's SQLite VFS: the platform's own (unix, win32), except
//! that what SQLite writes to the WAL is gathered and handed on in as few
//! writes as the platform's VFS takes (one per 124 KiB) when SQLite syncs it
//! (or reads it, sizes it, truncates it, publishes it to readers, or the
//! gathered bytes pass a bound).
//!
//! SQLite writes each WAL frame as two calls, its 24-byte header and then
//! its page: ~44 `pwrite64` per commit of ~21 webhook runs, the writer's
//! costliest system calls after the fsync. A commit's frames are contiguous
//! in the WAL, so they go out as one or two writes (docs/benchmarks.md,
//! issue 24: ~3 µs less system time per webhook request).
//!
//! Nothing is acknowledged sooner, and nothing is read that is not there:
//! - every sync of the WAL writes what was gathered first, so a commit's
//!   fsync covers the same bytes as before;
//! - readers (other connections) find new frames through the WAL index,
//!   which SQLite updates only after the frames are written and, between
//!   its two copies of the index header, calls the database file's
//!   `xShmBarrier`: that flushes too (what a connection at
//!   `synchronous=NORMAL`, which syncs no commit, relies on);
//! - any read, size, truncate or file control of the WAL flushes first, so
//!   this connection itself (a checkpoint reading frames back, SQLite
//!   rewriting a frame's checksum) never reads around its own buffer;
//! - a frame written again within the gathered bytes (SQLite rewrites a
//!   page changed twice in one transaction in place) is patched in place.
//!
//! A failed flush is reported by the call that flushed (a sync: the commit
//! fails and rolls back, as if the write had failed), and the gathered
//! bytes are dropped: SQLite never counts frames of a failed commit. The
//! one call that cannot report is `xShmBarrier`, which returns nothing; it
//! has bytes to write only at `synchronous=NORMAL` or `OFF`, where a commit
//! is not synced and so not known to be on disk either. The journal writer
//! runs at `FULL`: its sync flushes first, and a failed write fails the
//! commit before any reader can see it.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use libsqlite3_sys as ffi;

/// The name to open a connection with (`SqliteConnectOptions::vfs`).
pub(crate) const NAME: &str = "sluice-wal-gather";
const NAME_C: &CStr = c"sluice-wal-gather";

/// The most one write hands the real VFS: the unix VFS writes at most
/// 128 KiB − 1 bytes per call (`seekAndWriteFd` masks the length to 17
/// bits, and reports the rest as a full disk).
const CHUNK: usize = 124 * 1024;

/// Gathered bytes past this are written out at once (a commit of large
/// values): the buffer stays small, and no frame waits long in memory.
const FLUSH_AT: usize = 1 << 20;

/// Registers the VFS once per process. None: it could not be (no default
/// VFS; SQLite out of memory), and the writer opens with the default one.
pub(crate) fn name() -> Option<&'static str> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    // SAFETY: see `register`.
    REGISTERED
        .get_or_init(|| unsafe { register() })
        .then_some(NAME)
}

/// The platform VFS this one wraps.
struct Real(*mut ffi::sqlite3_vfs);
// SAFETY: SQLite's VFS objects are process-wide and immutable once
// registered; the pointer is only read.
unsafe impl Send for Real {}
unsafe impl Sync for Real {}
static REAL: OnceLock<Real> = OnceLock::new();

struct Vfs(ffi::sqlite3_vfs);
// SAFETY: as `Real`: written once before registration, then only read.
unsafe impl Send for Vfs {}
unsafe impl Sync for Vfs {}
static VFS: OnceLock<Box<Vfs>> = OnceLock::new();

/// # Safety
/// Called once (through `name`'s `OnceLock`).
unsafe fn register() -> bool {
    // SAFETY: `sqlite3_vfs_find(NULL)` initializes SQLite and returns the
    // default VFS, which lives for the process.
    let real = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
    if real.is_null() {
        return false;
    }
    REAL.get_or_init(|| Real(real));
    // A copy of the real VFS (its methods get this one as their first
    // argument and read only fields copied from it, `pAppData` included),
    // with its own name, a file object that holds the real one, and its own
    // open.
    // SAFETY: `real` is a valid VFS (above).
    let mut vfs = unsafe { *real };
    vfs.szOsFile = c_int::try_from(REAL_AT)
        .ok()
        .and_then(|at| at.checked_add(vfs.szOsFile))
        .unwrap_or(c_int::MAX);
    vfs.pNext = ptr::null_mut();
    vfs.zName = NAME_C.as_ptr();
    vfs.xOpen = Some(x_open);
    let vfs = VFS.get_or_init(|| Box::new(Vfs(vfs)));
    // SAFETY: the VFS lives in a static for the process, as SQLite needs;
    // registered once, not as the default.
    let rc = unsafe { ffi::sqlite3_vfs_register(ptr::from_ref(&vfs.0).cast_mut(), 0) };
    rc == ffi::SQLITE_OK
}

/// The file object SQLite allocates for this VFS (`szOsFile` bytes): ours,
/// then the real VFS's at `REAL_AT`.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// For a WAL: what is gathered. None for any other file.
    gather: Option<Box<Gather>>,
    /// For a database file: its WAL (gathering), for `xShmBarrier`.
    wal: *mut File,
    /// For a WAL: its database file, to unlink itself on close.
    db: *mut File,
}

/// Where the real file object starts (SQLite's allocations, and so this
/// one, are 8-byte aligned, which is all a C file object needs).
const REAL_AT: usize = std::mem::size_of::<File>().next_multiple_of(8);

#[derive(Default)]
struct Gather {
    bytes: Vec<u8>,
    /// The WAL offset of `bytes[0]`.
    at: i64,
}

/// The io methods of a real file.
///
/// # Safety
/// `f` is an open file of this VFS.
unsafe fn real(f: *mut File) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: an open file holds an open real file, whose methods are static.
    unsafe {
        let real = (*f).real;
        (real, &*(*real).pMethods)
    }
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Real(real_vfs)) = REAL.get() else {
        return ffi::SQLITE_CANTOPEN;
    };
    let f = file.cast::<File>();
    // SAFETY: SQLite gives `szOsFile` bytes for `file`, aligned for any
    // object: ours first, the real one at `REAL_AT`.
    unsafe {
        let real = file.cast::<u8>().add(REAL_AT).cast::<ffi::sqlite3_file>();
        ptr::write(
            f,
            File {
                base: ffi::sqlite3_file {
                    pMethods: ptr::null(),
                },
                real,
                gather: None,
                wal: ptr::null_mut(),
                db: ptr::null_mut(),
            },
        );
        let Some(open) = (**real_vfs).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = open(*real_vfs, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            // SQLite closes a failed open's file only if its methods are
            // set; ours are not, so the real one is closed here.
            if !(*real).pMethods.is_null()
                && let Some(close) = (*(*real).pMethods).xClose
            {
                close(real);
            }
            return rc;
        }
        if flags & ffi::SQLITE_OPEN_WAL != 0 {
            (*f).gather = Some(Box::default());
            // The database file this WAL belongs to, opened through this
            // VFS by the same pager (SQLite ≥ 3.33 names it).
            let db = ffi::sqlite3_database_file_object(name).cast::<File>();
            if !db.is_null() && METHODS.iter().any(|m| ptr::eq(m, (*db).base.pMethods)) {
                (*db).wal = f;
                (*f).db = db;
            }
        }
        (*f).base.pMethods = methods(real);
    }
    ffi::SQLITE_OK
}

/// This VFS's methods for a real file: the same version as its own (a
/// version 1 file has no shared memory, and SQLite then asks for none).
///
/// # Safety
/// `real` is an open real file.
unsafe fn methods(real: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: an open file's methods are set.
    let version = unsafe { (*(*real).pMethods).iVersion };
    &METHODS[usize::try_from(version.clamp(1, 3)).unwrap_or(1) - 1]
}

static METHODS: [ffi::sqlite3_io_methods; 3] = [methods_of(1), methods_of(2), methods_of(3)];

const fn methods_of(version: c_int) -> ffi::sqlite3_io_methods {
    ffi::sqlite3_io_methods {
        iVersion: version,
        xClose: Some(x_close),
        xRead: Some(x_read),
        xWrite: Some(x_write),
        xTruncate: Some(x_truncate),
        xSync: Some(x_sync),
        xFileSize: Some(x_file_size),
        xLock: Some(x_lock),
        xUnlock: Some(x_unlock),
        xCheckReservedLock: Some(x_check_reserved_lock),
        xFileControl: Some(x_file_control),
        xSectorSize: Some(x_sector_size),
        xDeviceCharacteristics: Some(x_device_characteristics),
        xShmMap: Some(x_shm_map),
        xShmLock: Some(x_shm_lock),
        xShmBarrier: Some(x_shm_barrier),
        xShmUnmap: Some(x_shm_unmap),
        xFetch: Some(x_fetch),
        xUnfetch: Some(x_unfetch),
    }
}

/// Writes what `f` gathered, if anything, in one call.
///
/// # Safety
/// `f` is an open file of this VFS.
unsafe fn flush(f: *mut File) -> c_int {
    // SAFETY: an open file; its gather buffer is only touched on the
    // thread SQLite calls it from.
    unsafe {
        let Some(g) = (*f).gather.as_deref_mut() else {
            return ffi::SQLITE_OK;
        };
        if g.bytes.is_empty() {
            return ffi::SQLITE_OK;
        }
        let (real, m) = real(f);
        let mut rc = ffi::SQLITE_OK;
        let mut at = g.at;
        for chunk in g.bytes.chunks(CHUNK) {
            #[cfg(test)]
            tests::WAL_WRITES.with(|n| n.set(n.get() + 1));
            rc = match (m.xWrite, c_int::try_from(chunk.len())) {
                (Some(write), Ok(len)) => write(real, chunk.as_ptr().cast(), len, at),
                _ => ffi::SQLITE_IOERR_WRITE,
            };
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += chunk.len() as i64;
        }
        // Written or not, they are gone: a failed write fails the commit
        // that syncs next, and SQLite writes its frames again if it retries.
        g.bytes.clear();
        if g.bytes.capacity() > 2 * FLUSH_AT {
            g.bytes.shrink_to(FLUSH_AT);
        }
        rc
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: SQLite closes an open file once; it is not used after.
    unsafe {
        let flushed = flush(f);
        let (real, m) = real(f);
        let rc = m.xClose.map_or(ffi::SQLITE_OK, |close| close(real));
        if !(*f).db.is_null() {
            (*(*f).db).wal = ptr::null_mut();
        }
        if !(*f).wal.is_null() {
            (*(*f).wal).db = ptr::null_mut();
        }
        drop((*f).gather.take());
        (*f).base.pMethods = ptr::null();
        if flushed == ffi::SQLITE_OK {
            rc
        } else {
            flushed
        }
    }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file; arguments passed on as SQLite gave them.
    unsafe {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(f);
        m.xRead.map_or(ffi::SQLITE_IOERR_READ, |read| {
            read(real, buf, amount, offset)
        })
    }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file; `buf` holds `amount` bytes (SQLite's contract).
    unsafe {
        let (real, m) = real(f);
        let (Some(g), Ok(len)) = ((*f).gather.as_deref_mut(), usize::try_from(amount)) else {
            return m.xWrite.map_or(ffi::SQLITE_IOERR_WRITE, |write| {
                write(real, buf, amount, offset)
            });
        };
        #[cfg(test)]
        tests::WAL_WRITES_ASKED.with(|n| n.set(n.get() + 1));
        let data = std::slice::from_raw_parts(buf.cast::<u8>(), len);
        let end = g.at + g.bytes.len() as i64;
        if !g.bytes.is_empty() && offset >= g.at && offset + i64::from(amount) <= end {
            // A frame written again (its page changed twice in one
            // transaction): patched where it lies.
            let from = (offset - g.at) as usize;
            g.bytes[from..from + len].copy_from_slice(data);
            return ffi::SQLITE_OK;
        }
        if !g.bytes.is_empty() && offset != end {
            let rc = flush(f);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        // `flush` may have run: borrow again.
        let Some(g) = (*f).gather.as_deref_mut() else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        if g.bytes.is_empty() {
            g.at = offset;
        }
        g.bytes.extend_from_slice(data);
        if g.bytes.len() >= FLUSH_AT {
            return flush(f);
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file.
    unsafe {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(f);
        m.xTruncate
            .map_or(ffi::SQLITE_IOERR_TRUNCATE, |truncate| truncate(real, size))
    }
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file.
    unsafe {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(f);
        m.xSync
            .map_or(ffi::SQLITE_IOERR_FSYNC, |sync| sync(real, flags))
    }
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file.
    unsafe {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(f);
        m.xFileSize
            .map_or(ffi::SQLITE_IOERR_FSTAT, |file_size| file_size(real, size))
    }
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file.
    unsafe {
        let (real, m) = real(file.cast());
        m.xLock
            .map_or(ffi::SQLITE_IOERR_LOCK, |lock| lock(real, level))
    }
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file.
    unsafe {
        let (real, m) = real(file.cast());
        m.xUnlock
            .map_or(ffi::SQLITE_IOERR_UNLOCK, |unlock| unlock(real, level))
    }
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: an open file.
    unsafe {
        let (real, m) = real(file.cast());
        m.xCheckReservedLock
            .map_or(ffi::SQLITE_IOERR_CHECKRESERVEDLOCK, |check| {
                check(real, out)
            })
    }
}

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file.
    unsafe {
        // A size hint, a persist-WAL query: whatever it is, on the bytes
        // as SQLite believes them written.
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(f);
        m.xFileControl
            .map_or(ffi::SQLITE_NOTFOUND, |control| control(real, op, arg))
    }
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file.
    unsafe {
        let (real, m) = real(file.cast());
        m.xSectorSize.map_or(4096, |size| size(real))
    }
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file.
    unsafe {
        let (real, m) = real(file.cast());
        m.xDeviceCharacteristics.map_or(0, |dc| dc(real))
    }
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: an open file; SQLite asks only of a version ≥ 2 file.
    unsafe {
        let (real, m) = real(file.cast());
        m.xShmMap.map_or(ffi::SQLITE_IOERR_SHMMAP, |map| {
            map(real, page, size, extend, out)
        })
    }
}

unsafe extern "C" fn x_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: as `x_shm_map`.
    unsafe {
        let (real, m) = real(file.cast());
        m.xShmLock.map_or(ffi::SQLITE_IOERR_SHMLOCK, |lock| {
            lock(real, offset, n, flags)
        })
    }
}

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    let f = file.cast::<File>();
    // SAFETY: as `x_shm_map`; the WAL link is cleared when either closes.
    unsafe {
        // Between the WAL index header's two copies: frames it is about to
        // publish to readers must be in the file first. A failure here has
        // no way to be reported; the commit's sync (which flushed before
        // it, at `synchronous=FULL`) already did.
        if !(*f).wal.is_null() {
            flush((*f).wal);
        }
        let (real, m) = real(f);
        if let Some(barrier) = m.xShmBarrier {
            barrier(real);
        }
    }
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: as `x_shm_map`.
    unsafe {
        let (real, m) = real(file.cast());
        m.xShmUnmap
            .map_or(ffi::SQLITE_OK, |unmap| unmap(real, delete))
    }
}

unsafe extern "C" fn x_fetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let f = file.cast::<File>();
    // SAFETY: an open file, version 3.
    unsafe {
        // Memory-mapped reads see the file: nothing may be held back.
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(f);
        match m.xFetch {
            Some(fetch) => fetch(real, offset, amount, out),
            None => {
                *out = ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn x_unfetch(file: *mut ffi::sqlite3_file, offset: i64, p: *mut c_void) -> c_int {
    // SAFETY: an open file, version 3.
    unsafe {
        let (real, m) = real(file.cast());
        m.xUnfetch
            .map_or(ffi::SQLITE_OK, |unfetch| unfetch(real, offset, p))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::ffi::CString;

    use super::*;

    thread_local! {
        /// Writes that reached a WAL file from this thread.
        pub(super) static WAL_WRITES: Cell<usize> = const { Cell::new(0) };
        /// Writes SQLite made to a WAL file from this thread.
        pub(super) static WAL_WRITES_ASKED: Cell<usize> = const { Cell::new(0) };
    }

    /// A raw connection, on this thread (so the VFS's calls are too).
    struct Conn(*mut ffi::sqlite3);

    impl Conn {
        fn open(path: &std::path::Path, vfs: Option<&str>) -> Conn {
            let path = CString::new(path.to_str().expect("utf-8 path")).expect("path");
            let vfs = vfs.map(|v| CString::new(v).expect("vfs name"));
            let mut db = ptr::null_mut();
            // SAFETY: valid C strings; the handle is closed in Drop.
            let rc = unsafe {
                ffi::sqlite3_open_v2(
                    path.as_ptr(),
                    &mut db,
                    ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE,
                    vfs.as_ref().map_or(ptr::null(), |v| v.as_ptr()),
                )
            };
            assert_eq!(rc, ffi::SQLITE_OK, "open");
            Conn(db)
        }

        fn exec(&self, sql: &str) {
            let sql = CString::new(sql).expect("sql");
            let mut err = ptr::null_mut();
            // SAFETY: open handle, C string, error string freed below.
            let rc =
                unsafe { ffi::sqlite3_exec(self.0, sql.as_ptr(), None, ptr::null_mut(), &mut err) };
            if rc != ffi::SQLITE_OK {
                // SAFETY: SQLite's error string, freed with its allocator.
                let msg = unsafe { CStr::from_ptr(err).to_string_lossy().into_owned() };
                unsafe { ffi::sqlite3_free(err.cast()) };
                panic!("{sql:?}: {msg} ({rc})");
            }
        }

        /// The first column of the first row, as text.
        fn text(&self, sql: &str) -> String {
            let sql = CString::new(sql).expect("sql");
            let mut stmt = ptr::null_mut();
            // SAFETY: open handle; the statement is finalized below.
            unsafe {
                let rc =
                    ffi::sqlite3_prepare_v2(self.0, sql.as_ptr(), -1, &mut stmt, ptr::null_mut());
                assert_eq!(rc, ffi::SQLITE_OK, "{sql:?}: {}", self.error());
                let rc = ffi::sqlite3_step(stmt);
                let out = if rc == ffi::SQLITE_ROW {
                    let t = ffi::sqlite3_column_text(stmt, 0);
                    if t.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(t.cast()).to_string_lossy().into_owned()
                    }
                } else {
                    let e = self.error();
                    ffi::sqlite3_finalize(stmt);
                    panic!("{sql:?}: {e} ({rc})");
                };
                ffi::sqlite3_finalize(stmt);
                out
            }
        }

        fn error(&self) -> String {
            // SAFETY: open handle; the message is copied at once.
            unsafe {
                CStr::from_ptr(ffi::sqlite3_errmsg(self.0))
                    .to_string_lossy()
                    .into_owned()
            }
        }
    }

    impl Drop for Conn {
        fn drop(&mut self) {
            // SAFETY: opened in `open`, closed once.
            unsafe { ffi::sqlite3_close(self.0) };
        }
    }

    fn wal_db(dir: &tempfile::TempDir, synchronous: &str) -> (Conn, Conn) {
        let path = dir.path().join("t.db");
        let writer = Conn::open(&path, Some(name().expect("the VFS registers")));
        writer.exec("PRAGMA journal_mode = WAL");
        writer.exec(&format!("PRAGMA synchronous = {synchronous}"));
        writer.exec("PRAGMA wal_autocheckpoint = 0");
        writer.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)");
        // Another connection, on the platform's own VFS, as sqlx's readers are.
        let reader = Conn::open(&path, None);
        (writer, reader)
    }

    #[test]
    fn a_commit_reaches_the_wal_in_one_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, reader) = wal_db(&dir, "FULL");
        writer.exec("INSERT INTO t (v) VALUES (zeroblob(10))");
        WAL_WRITES.with(|n| n.set(0));
        WAL_WRITES_ASKED.with(|n| n.set(0));
        // ~60 pages: ~120 writes as SQLite makes them (a header and a page
        // per frame), ~250 KB.
        writer.exec(
            "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) \
             INSERT INTO t (v) SELECT randomblob(1000) FROM n; COMMIT",
        );
        let asked = WAL_WRITES_ASKED.with(Cell::get);
        let written = WAL_WRITES.with(Cell::get);
        assert!(asked > 100, "SQLite wrote the WAL {asked} times");
        // In 124 KiB pieces: ~250 KB is 2 or 3 of them.
        assert!(
            (2..=3).contains(&written),
            "{asked} writes of SQLite's reached the WAL in {written}"
        );
        assert_eq!(reader.text("SELECT count(*) FROM t"), "201");
        assert_eq!(reader.text("PRAGMA integrity_check"), "ok");
    }

    #[test]
    fn readers_see_every_commit_even_one_that_is_not_synced() {
        // At synchronous=NORMAL no commit syncs the WAL: its frames must be
        // written before the WAL index shows them to other connections.
        for synchronous in ["NORMAL", "FULL"] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (writer, reader) = wal_db(&dir, synchronous);
            for i in 1..=50 {
                writer.exec(&format!(
                    "BEGIN; INSERT INTO t (id, v) VALUES ({i}, randomblob(3000)); \
                     UPDATE t SET v = randomblob(50) WHERE id = {i} - 1; COMMIT"
                ));
                assert_eq!(
                    reader.text("SELECT count(*) || ':' || max(id) FROM t"),
                    format!("{i}:{i}"),
                    "at synchronous={synchronous}"
                );
            }
            assert_eq!(reader.text("PRAGMA integrity_check"), "ok");
        }
    }

    #[test]
    fn big_transactions_spilled_and_rewritten_frames_and_checkpoints_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (writer, reader) = wal_db(&dir, "FULL");
        // A tiny page cache: SQLite writes frames before the commit (a
        // spill) and writes some pages again within the transaction.
        writer.exec("PRAGMA cache_size = 8");
        writer.exec(
            "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) \
             INSERT INTO t (id, v) SELECT i, randomblob(1500) FROM n; \
             UPDATE t SET v = zeroblob(700) WHERE id % 3 = 0; \
             UPDATE t SET v = zeroblob(900) WHERE id % 5 = 0; COMMIT",
        );
        let check = |c: &Conn| {
            assert_eq!(c.text("SELECT count(*) FROM t"), "3000");
            assert_eq!(
                c.text("SELECT count(*) FROM t WHERE length(v) = 900"),
                "600"
            );
            assert_eq!(
                c.text("SELECT count(*) FROM t WHERE length(v) = 700"),
                "800"
            );
            assert_eq!(c.text("PRAGMA integrity_check"), "ok");
        };
        check(&reader);
        check(&writer);
        // The checkpoint reads the frames back and copies them.
        writer.exec("PRAGMA wal_checkpoint(TRUNCATE)");
        check(&Conn::open(&dir.path().join("t.db"), None));
        // The WAL starts again, a new header at its start.
        writer.exec("INSERT INTO t (id, v) VALUES (5000, x'01')");
        assert_eq!(reader.text("SELECT hex(v) FROM t WHERE id = 5000"), "01");
        drop((writer, reader));
        // Closed: the WAL is folded into the database, which reads whole.
        let again = Conn::open(&dir.path().join("t.db"), None);
        assert_eq!(again.text("SELECT count(*) FROM t"), "3001");
        assert_eq!(again.text("PRAGMA integrity_check"), "ok");
    }
}
