//! Real database servers for tests: a PostgreSQL and a MariaDB (or MySQL)
//! started from Debian's packages in a temporary folder, on a free loopback
//! port, with a password user and a database `app`; stopped when dropped.
//! `cargo xtask test` installs the packages (as root).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const USER: &str = "sluice";
pub const PASSWORD: &str = "s3cret-pw-9f2c";
pub const DATABASE: &str = "app";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The newest `/usr/lib/postgresql/<n>/bin`.
fn pg_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (apt-get install postgresql; `cargo xtask test` does)")
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("a PostgreSQL version in /usr/lib/postgresql")
        .1
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "no `postgres` user (the postgresql package makes it)"
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A command run as the `postgres` user when we are root (PostgreSQL
/// refuses to run as root); the process is the server itself, so a signal
/// to it reaches the server.
fn as_postgres(program: &Path) -> Command {
    use std::os::unix::process::CommandExt as _;
    let mut c = Command::new(program);
    if is_root() {
        c.uid(id_of("-u")).gid(id_of("-g"));
    }
    c
}

fn wait_for_port(port: u16, child: &mut Child, what: &str, log: &Path) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{what} did not listen on {port} within 60 s: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

fn stop(child: &mut Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A PostgreSQL server of our own.
pub struct Postgres {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = pg_bin();
        let dir = tempfile::Builder::new()
            .prefix("sluice-pg")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if is_root() {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(chown.success());
        }
        let out = as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                USER,
                "--auth=scram-sha-256",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pg = Postgres {
            port: free_port(),
            dir,
            child: None,
        };
        pg.run();
        pg.psql(&format!("CREATE DATABASE {DATABASE}"), "postgres");
        pg
    }

    fn run(&mut self) {
        let bin = pg_bin();
        let log = self.dir.path().join("log");
        let child = as_postgres(&bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-k")
            .arg(self.dir.path())
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let child = self.child.as_mut().unwrap();
        wait_for_port(self.port, child, "postgres", &log);
        // Listening is not yet accepting logins.
        let start = Instant::now();
        while !self.try_psql("SELECT 1", "postgres") {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "postgres never accepted logins"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (fast shutdown) and starts it again on the same port.
    pub fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c, "-INT");
        }
        self.run();
    }

    fn try_psql(&self, sql: &str, db: &str) -> bool {
        self.psql_output(sql, db).status.success()
    }

    fn psql_output(&self, sql: &str, db: &str) -> std::process::Output {
        Command::new(pg_bin().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-Atq", "-c", sql])
            .env("PGPASSWORD", PASSWORD)
            .output()
            .unwrap()
    }

    /// Runs SQL as the superuser; returns what psql printed.
    pub fn psql(&self, sql: &str, db: &str) -> String {
        let out = self.psql_output(sql, db);
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c, "-INT");
        }
    }
}

/// A MariaDB (or MySQL) server of our own.
pub struct MariaDb {
    pub port: u16,
    pub socket: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

fn mysqld() -> PathBuf {
    for p in ["/usr/sbin/mariadbd", "/usr/sbin/mysqld"] {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    panic!("MariaDB is installed (apt-get install mariadb-server; `cargo xtask test` does)");
}

impl MariaDb {
    pub fn start() -> MariaDb {
        let dir = tempfile::Builder::new()
            .prefix("sluice-maria")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        // A temp dir of its own: a server starting cleans `#sql*` files out
        // of its tmpdir, so servers sharing /tmp (tests run in parallel)
        // broke one another's bootstrap ("Unknown table 'mysql.tmp_user_sys'").
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if is_root() {
            install.arg("--user=root");
        }
        let out = install.output().unwrap();
        assert!(
            out.status.success(),
            "mariadb-install-db: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = MariaDb {
            port: free_port(),
            socket: dir.path().join("sock"),
            dir,
            child: None,
        };
        db.run();
        db.sql(&format!(
            "CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; \
             GRANT ALL ON *.* TO '{USER}'@'%'; CREATE DATABASE {DATABASE}"
        ));
        db
    }

    /// Runs SQL as root over the socket; returns what the client printed.
    pub fn sql(&self, sql: &str) -> String {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["-u", "root", "-N", "-B", "-e", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mariadb {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn run(&mut self) {
        let log = self.dir.path().join("log");
        let mut cmd = Command::new(mysqld());
        cmd.arg("--no-defaults")
            .arg(format!(
                "--datadir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--socket={}", self.socket.display()))
            .arg(format!(
                "--tmpdir={}",
                self.dir.path().join("tmp").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("pid").display()
            ))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
                "--innodb-buffer-pool-size=32M",
                "--innodb-flush-log-at-trx-commit=2",
                "--skip-log-bin",
            ]);
        if is_root() {
            cmd.arg("--user=root");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let child = self.child.as_mut().unwrap();
        wait_for_port(self.port, child, "mariadbd", &log);
    }

    /// Stops the server and starts it again on the same port.
    pub fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c, "-TERM");
        }
        self.run();
    }

    /// The log, for a test that fails.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c, "-TERM");
        }
    }
}
