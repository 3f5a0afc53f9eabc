//! The vault key in a real OS keyring: a private D-Bus session bus with
//! gnome-keyring's Secret Service on it (what a Linux desktop has), driven
//! through the `sluice` command. Without a keyring the key file is used.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// A session bus and a Secret Service, both killed on drop.
struct Desktop {
    bus: Child,
    keyring: Child,
    address: String,
    home: PathBuf,
    runtime: PathBuf,
}

impl Drop for Desktop {
    fn drop(&mut self) {
        self.keyring.kill().ok();
        self.bus.kill().ok();
        self.keyring.wait().ok();
        self.bus.wait().ok();
    }
}

impl Desktop {
    /// A session bus with a Secret Service whose login keyring is unlocked.
    /// gnome-keyring sometimes never creates the login collection when it
    /// starts headless; then it is started again, afresh.
    fn start(dir: &Path) -> Desktop {
        for attempt in 0..4 {
            let d = dir.join(format!("desktop{attempt}"));
            std::fs::create_dir_all(&d).unwrap();
            if let Some(desktop) = Desktop::try_start(&d) {
                return desktop;
            }
        }
        panic!("the Secret Service never offered a login keyring (4 attempts)");
    }

    fn try_start(dir: &Path) -> Option<Desktop> {
        use std::io::{BufRead, Write};
        let home = dir.join("home");
        let runtime = dir.join("run");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&runtime).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let mut bus = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:path={}", dir.join("bus").display()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("dbus-daemon (cargo xtask test installs dbus)");
        let mut address = String::new();
        std::io::BufReader::new(bus.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        let address = address.trim().to_string();
        assert!(address.starts_with("unix:"), "bus address {address:?}");
        let mut keyring = Command::new("gnome-keyring-daemon")
            .args([
                "--replace",
                "--foreground",
                "--components=secrets",
                "--unlock",
            ])
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("XDG_DATA_HOME", home.join("data"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gnome-keyring-daemon (cargo xtask test installs gnome-keyring)");
        // The login keyring's password, then EOF: it is created unlocked.
        let mut stdin = keyring.stdin.take().unwrap();
        stdin.write_all(b"test-login-pw").unwrap();
        drop(stdin);
        let desktop = Desktop {
            bus,
            keyring,
            address,
            home,
            runtime,
        };
        // Ready once a secret can be stored: the service answers *and* its
        // default (login) collection exists and is unlocked. A lookup alone
        // can answer before that, and the engine would then (rightly) fall
        // back to a key file.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut probe = desktop
                .command("secret-tool")
                .args(["store", "--label", "sluice test probe"])
                .args(["service", "sluice-probe", "account", "ready"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = probe.stdin.take().unwrap();
            stdin.write_all(b"ok").unwrap();
            drop(stdin);
            let o = probe.wait_with_output().unwrap();
            if o.status.success() {
                return Some(desktop);
            }
            if Instant::now() >= deadline {
                let err = String::from_utf8_lossy(&o.stderr);
                eprintln!("Secret Service not ready, starting it again: {err}");
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("DBUS_SESSION_BUS_ADDRESS", &self.address)
            .env("HOME", &self.home)
            .env("XDG_RUNTIME_DIR", &self.runtime);
        c
    }
}

fn sluice(mut c: Command, data: &Path, args: &[&str]) -> Output {
    c.args(args)
        .env("SLUICE_DATA_DIR", data)
        .env_remove("SLUICE_VAULT_KEY")
        .output()
        .unwrap()
}

/// A command with no D-Bus session at all (a headless machine).
fn headless(program: &str) -> Command {
    let mut c = Command::new(program);
    c.env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env("XDG_RUNTIME_DIR", "/nonexistent");
    c
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A workflow whose only request uses credential `api` against a closed
/// port: it can only fail with a connection error once the credential
/// decrypted.
fn probe_workflow(dir: &Path) -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let wf = serde_json::json!({
        "format": "sluice.workflow/v1", "id": "probe",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "call", "kind": "http.request",
             "config": {"url": format!("http://127.0.0.1:{port}/"), "credential": "api"}}
        ],
        "edges": [{"from": "t", "to": "call"}]
    });
    let p = dir.join("probe.flow.json");
    std::fs::write(&p, wf.to_string()).unwrap();
    p.display().to_string()
}

#[test]
fn the_vault_key_lives_in_the_os_keyring_when_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let desktop = Desktop::start(dir.path());
    let data = dir.path().join("data");
    let set = [
        "credentials",
        "set",
        "api",
        "--kind",
        "bearer",
        "--json",
        r#"{"token": "kr-token-4242"}"#,
    ];
    let o = sluice(desktop.command(SLUICE), &data, &set);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !data.join("vault.key").exists(),
        "no key file beside the db"
    );
    let account = std::fs::read_to_string(data.join("vault.keyring")).unwrap();
    let account = account.trim();
    assert!(account.starts_with("vault key of "), "{account}");

    // The key is in the Secret Service under that account.
    let o = desktop
        .command("secret-tool")
        .args(["lookup", "service", "sluice", "username", account])
        .output()
        .unwrap();
    let key = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(key.len(), 64, "{}", text(&o));
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));

    // A second process decrypts with it: the run gets as far as the network.
    let wf = probe_workflow(dir.path());
    let o = sluice(desktop.command(SLUICE), &data, &["run", &wf]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("127.0.0.1:") && !out.contains("vault"),
        "{out}"
    );

    // Without the keyring the vault cannot open, and says where the key is;
    // no new key file is made behind the user's back.
    let o = sluice(headless(SLUICE), &data, &["run", &wf]);
    let out = text(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("OS keyring") && out.contains("vault.keyring"),
        "{out}"
    );
    assert!(!data.join("vault.key").exists());
    drop(desktop);
}

#[test]
fn without_a_keyring_the_key_file_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let o = sluice(
        headless(SLUICE),
        &data,
        &[
            "credentials",
            "set",
            "api",
            "--kind",
            "bearer",
            "--json",
            r#"{"token": "file-tok-99"}"#,
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(data.join("vault.key").exists());
    assert!(!data.join("vault.keyring").exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("vault.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Forcing the keyring where there is none is an error, not a silent file.
    let data2 = dir.path().join("data2");
    let mut c = headless(SLUICE);
    c.env("SLUICE_VAULT_KEY", "keyring");
    let o = c
        .args([
            "credentials",
            "set",
            "api",
            "--kind",
            "bearer",
            "--json",
            r#"{"token": "x"}"#,
        ])
        .env("SLUICE_DATA_DIR", &data2)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("OS keyring"), "{}", text(&o));
    assert!(!data2.join("vault.key").exists());
}
