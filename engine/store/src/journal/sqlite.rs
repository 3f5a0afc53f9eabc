//! The few SQLite calls the journal writer makes, on the raw handle of its
//! own connection (locked out of sqlx for the writer's lifetime, see
//! `writer.rs`): statements prepared once and kept, values bound where they
//! lie (no copy into an argument buffer, none into SQLite), one thread.
//!
//! Every binding lives only for one [`Stmt::run`]: it binds, steps, then
//! resets and clears the bindings before returning, so no pointer to the
//! caller's text outlives the borrow it came from.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_int};
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;

/// A failed SQLite call: its extended result code and message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} (SQLite code {code})")]
pub struct SqliteError {
    pub code: i32,
    pub message: String,
}

/// A value to bind.
#[derive(Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Int(i64),
    Null,
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Arg<'a> {
        Arg::Text(s)
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

impl<'a, T: Into<Arg<'a>>> From<Option<T>> for Arg<'a> {
    fn from(v: Option<T>) -> Arg<'a> {
        v.map_or(Arg::Null, Into::into)
    }
}

/// The connection's handle. Not `Send`: it stays on the writer's thread.
pub(crate) struct Db {
    handle: NonNull<ffi::sqlite3>,
    _not_send: std::marker::PhantomData<*mut ()>,
}

impl Db {
    /// Locks `conn`'s handle out of sqlx (its worker thread waits until it
    /// is given back) and runs `f` with it on this thread. Blocks: call it
    /// from a thread of its own, not from a tokio worker.
    pub(crate) fn with_locked<T>(
        conn: &mut sqlx::SqliteConnection,
        f: impl FnOnce(&Db) -> T,
    ) -> Result<T, sqlx::Error> {
        let mut locked = futures::executor::block_on(conn.lock_handle())?;
        let db = Db {
            handle: locked.as_raw_handle(),
            _not_send: std::marker::PhantomData,
        };
        // `db` (and every statement of it, which borrow it) is gone before
        // `locked` gives the handle back.
        let out = f(&db);
        drop(locked);
        Ok(out)
    }

    fn error(&self, code: c_int) -> SqliteError {
        // SAFETY: the handle is open (see `new`); errmsg returns a string
        // owned by SQLite, valid until the next call, copied out here.
        let message = unsafe {
            let msg = ffi::sqlite3_errmsg(self.handle.as_ptr());
            if msg.is_null() {
                String::new()
            } else {
                CStr::from_ptr(msg).to_string_lossy().into_owned()
            }
        };
        // SAFETY: as above.
        let extended = unsafe { ffi::sqlite3_extended_errcode(self.handle.as_ptr()) };
        SqliteError {
            // The extended code names the cause (a UNIQUE constraint, not
            // just a constraint); the call's own code if there is none.
            code: if extended & 0xff == code & 0xff {
                extended
            } else {
                code
            },
            message,
        }
    }

    /// Runs SQL without results (BEGIN, COMMIT, SAVEPOINT, PRAGMA).
    pub(crate) fn exec(&self, sql: &str) -> Result<(), SqliteError> {
        let sql = CString::new(sql).map_err(|_| SqliteError {
            code: ffi::SQLITE_MISUSE,
            message: "SQL holds a NUL byte".into(),
        })?;
        // SAFETY: open handle, NUL-terminated SQL, no callback, and no
        // error string asked for (errmsg reads it instead).
        let rc = unsafe {
            ffi::sqlite3_exec(
                self.handle.as_ptr(),
                sql.as_ptr(),
                None,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(self.error(rc))
        }
    }

    /// Prepares a statement kept for the writer's lifetime.
    pub(crate) fn prepare(&self, sql: &str) -> Result<Stmt<'_>, SqliteError> {
        let len = c_int::try_from(sql.len()).map_err(|_| SqliteError {
            code: ffi::SQLITE_TOOBIG,
            message: "SQL too long".into(),
        })?;
        let mut stmt = ptr::null_mut();
        // SAFETY: open handle; `sql` is valid for `len` bytes during the
        // call (SQLite copies what it keeps).
        let rc = unsafe {
            ffi::sqlite3_prepare_v3(
                self.handle.as_ptr(),
                sql.as_ptr().cast(),
                len,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut stmt,
                ptr::null_mut(),
            )
        };
        match NonNull::new(stmt) {
            Some(stmt) if rc == ffi::SQLITE_OK => Ok(Stmt { db: self, stmt }),
            _ => Err(self.error(rc)),
        }
    }

    /// The first column of the first row of `sql` (a PRAGMA's value; 0
    /// when it returns no row).
    pub(crate) fn query_i64(&self, sql: &str) -> Result<i64, SqliteError> {
        let stmt = self.prepare(sql)?;
        // SAFETY: a valid statement without parameters; the column is read
        // only while the statement is on its row, before it is finalized
        // (dropped) below.
        let rc = unsafe { ffi::sqlite3_step(stmt.stmt.as_ptr()) };
        match rc {
            ffi::SQLITE_ROW => Ok(unsafe { ffi::sqlite3_column_int64(stmt.stmt.as_ptr(), 0) }),
            ffi::SQLITE_DONE => Ok(0),
            _ => Err(self.error(rc)),
        }
    }

    /// Rows changed by the last statement run.
    pub(crate) fn changes(&self) -> i64 {
        // SAFETY: open handle.
        unsafe { ffi::sqlite3_changes64(self.handle.as_ptr()) }
    }

    /// False while a transaction is open (SQLite may have rolled one back
    /// by itself after some errors).
    pub(crate) fn in_transaction(&self) -> bool {
        // SAFETY: open handle.
        unsafe { ffi::sqlite3_get_autocommit(self.handle.as_ptr()) == 0 }
    }
}

/// A prepared statement of [`Db`].
pub(crate) struct Stmt<'db> {
    db: &'db Db,
    stmt: NonNull<ffi::sqlite3_stmt>,
}

impl Stmt<'_> {
    /// Binds `args` (in order, from 1), runs the statement to its end and
    /// resets it. Returns the number of rows it changed.
    pub(crate) fn run(&mut self, args: &[Arg<'_>]) -> Result<i64, SqliteError> {
        let result = self.bind_all(args).and_then(|()| self.step());
        // SAFETY: the statement is valid; reset and clear_bindings drop
        // every pointer bound above before `args` can go away.
        unsafe {
            ffi::sqlite3_reset(self.stmt.as_ptr());
            ffi::sqlite3_clear_bindings(self.stmt.as_ptr());
        }
        result.map(|()| self.db.changes())
    }

    fn bind_all(&mut self, args: &[Arg<'_>]) -> Result<(), SqliteError> {
        for (i, arg) in args.iter().enumerate() {
            let i = c_int::try_from(i + 1).unwrap_or(c_int::MAX);
            let p = self.stmt.as_ptr();
            // SAFETY: valid statement; text is valid for its length until
            // `run` resets the statement and clears its bindings
            // (SQLITE_STATIC: SQLite does not copy it).
            let rc = unsafe {
                match *arg {
                    Arg::Text(s) => {
                        let Ok(len) = c_int::try_from(s.len()) else {
                            return Err(SqliteError {
                                code: ffi::SQLITE_TOOBIG,
                                message: format!("a value of {} bytes is too big", s.len()),
                            });
                        };
                        ffi::sqlite3_bind_text(p, i, s.as_ptr().cast(), len, ffi::SQLITE_STATIC())
                    }
                    Arg::Int(v) => ffi::sqlite3_bind_int64(p, i, v),
                    Arg::Null => ffi::sqlite3_bind_null(p, i),
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(self.db.error(rc));
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), SqliteError> {
        loop {
            // SAFETY: valid statement with its parameters bound.
            let rc = unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) };
            match rc {
                ffi::SQLITE_DONE => return Ok(()),
                ffi::SQLITE_ROW => continue,
                _ => return Err(self.db.error(rc)),
            }
        }
    }
}

impl Drop for Stmt<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized once, here; the connection outlives `self`.
        unsafe {
            ffi::sqlite3_finalize(self.stmt.as_ptr());
        }
    }
}
