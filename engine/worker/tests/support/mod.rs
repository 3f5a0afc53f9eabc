//! A real restate-server for the worker's tests: the binary from the npm
//! package `@restatedev/restate-server` (`cargo xtask test` installs it and
//! sets `SLUICE_RESTATE_SERVER`), on loopback ports of its own, in a base
//! dir of its own, killed with the test process (a watchdog shell).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Restate {
    pub ingress: String,
    pub admin: String,
    pub base: PathBuf,
    ports: [u16; 3],
    watchdog: Child,
    pid: u32,
}

fn binary() -> PathBuf {
    match std::env::var_os("SLUICE_RESTATE_SERVER") {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "SLUICE_RESTATE_SERVER is not set: `cargo xtask test` installs restate-server \
             (npm @restatedev/restate-server) and sets it"
        ),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Restate {
    /// Starts a restate-server in `base` on fresh ports and waits until it serves.
    ///
    /// A free port can be taken by another test between being picked and
    /// bound: a server that fails for "Address in use" is started again on
    /// other ports, in a fresh base dir.
    pub fn start(base: &Path) -> Restate {
        for attempt in 1.. {
            match Restate::try_start_on(base, [free_port(), free_port(), free_port()]) {
                Ok(r) => return r,
                Err(log) if log.contains("Address in use") && attempt < 5 => {
                    std::fs::remove_dir_all(base).ok();
                }
                Err(log) => panic!("restate-server did not come up; its log:\n{log}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// Starts one on these ports (a restart keeps its ports and base dir).
    pub fn start_on(base: &Path, ports: [u16; 3]) -> Restate {
        Restate::try_start_on(base, ports)
            .unwrap_or_else(|log| panic!("restate-server did not come up; its log:\n{log}"))
    }

    /// Starts one on these ports; its log when it does not come up.
    fn try_start_on(base: &Path, ports: [u16; 3]) -> Result<Restate, String> {
        std::fs::create_dir_all(base).expect("restate base dir");
        let [ingress, admin, node] = ports;
        let script = r#"R="$1"; shift; "$R" "$@" >>"$RESTATE_TEST_LOG" 2>&1 & c=$!; echo $c; while kill -0 "$RESTATE_TEST_PARENT" 2>/dev/null && kill -0 $c 2>/dev/null; do sleep 0.3; done; kill -9 $c 2>/dev/null"#;
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(binary())
            .arg("--no-logo")
            .arg("--base-dir")
            .arg(base)
            .arg("--node-name")
            .arg("sluice-test")
            .arg("--bind-address")
            .arg(format!("127.0.0.1:{node}"))
            .arg("--advertised-address")
            .arg(format!("http://127.0.0.1:{node}"))
            .env("RESTATE_TEST_PARENT", std::process::id().to_string())
            .env("RESTATE_TEST_LOG", base.join("restate.log"))
            .env("RESTATE_DISABLE_TELEMETRY", "true")
            .env("RESTATE_LISTEN_MODE", "tcp")
            .env(
                "RESTATE_INGRESS__BIND_ADDRESS",
                format!("127.0.0.1:{ingress}"),
            )
            .env("RESTATE_ADMIN__BIND_ADDRESS", format!("127.0.0.1:{admin}"))
            .env("RESTATE_DEFAULT_NUM_PARTITIONS", "4")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start restate-server");
        let mut line = String::new();
        BufReader::new(watchdog.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("restate-server pid");
        let pid = line.trim().parse().expect("a pid");
        let r = Restate {
            ingress: format!("http://127.0.0.1:{ingress}"),
            admin: format!("http://127.0.0.1:{admin}"),
            base: base.to_path_buf(),
            ports,
            watchdog,
            pid,
        };
        match r.wait_ready() {
            Ok(()) => Ok(r),
            Err(log) => Err(log),
        }
    }

    /// Waits until it serves; its log when it exits or stays silent 90 s.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(90);
        let up = |url: &str| {
            std::net::TcpStream::connect_timeout(
                &url.trim_start_matches("http://").parse().expect("addr"),
                Duration::from_millis(200),
            )
            .is_ok()
        };
        let log = || std::fs::read_to_string(self.base.join("restate.log")).unwrap_or_default();
        while Instant::now() < deadline {
            if up(&self.ingress) && up(&self.admin) {
                // Listening is not yet serving: the partitions come up just after.
                std::thread::sleep(Duration::from_millis(500));
                return Ok(());
            }
            let alive = Command::new("kill")
                .args(["-0", &self.pid.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if !alive || log().contains("Address in use") {
                return Err(log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("(silent for 90 s)\n{}", log()))
    }

    /// SIGKILLs restate-server.
    pub fn kill(&mut self) {
        Command::new("kill")
            .arg("-9")
            .arg(self.pid.to_string())
            .status()
            .ok();
        self.watchdog.wait().ok();
    }

    /// Kills it and starts it again on the same base dir and ports.
    pub fn restart(&mut self) {
        self.kill();
        let again = Restate::start_on(&self.base.clone(), self.ports);
        let old = std::mem::replace(self, again);
        // Already killed; its drop would kill the pid again (maybe reused).
        std::mem::forget(old);
    }
}

impl Drop for Restate {
    fn drop(&mut self) {
        self.kill();
    }
}
