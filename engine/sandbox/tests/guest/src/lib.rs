//! Does what its input asks (`{"do": "..."}`), so the sandbox tests can check
//! results, limits and denied capabilities with one component.

wit_bindgen::generate!({
    path: "../../wit",
    world: "node",
});

struct Node;

fn wants(input: &str, what: &str) -> bool {
    input.contains(&format!("\"do\":\"{what}\"")) || input.contains(&format!("\"do\": \"{what}\""))
}

impl Guest for Node {
    fn run(input: String) -> Result<String, String> {
        if wants(&input, "loop") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if wants(&input, "chatty-loop") {
            log("info", "starting");
            println!("stdout before the loop");
            eprintln!("stderr too");
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if wants(&input, "alloc") {
            let mut keep: Vec<Vec<u8>> = Vec::new();
            loop {
                keep.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&keep);
            }
        }
        if wants(&input, "sleep") {
            // Blocks in WASI (monotonic-clock subscribe + pollable.block),
            // where epoch deadlines never fire.
            std::thread::sleep(std::time::Duration::from_secs(20));
            return Ok("{\"slept\": true}".to_string());
        }
        if wants(&input, "passwd") {
            return match std::fs::read_to_string("/etc/passwd") {
                Ok(text) => Ok(format!("{{\"read\": {}}}", text.len())),
                Err(e) => Ok(format!("{{\"denied\": \"{e}\"}}")),
            };
        }
        if wants(&input, "socket") {
            let port = input
                .split("\"port\":")
                .nth(1)
                .and_then(|r| r.trim().split(|c: char| !c.is_ascii_digit()).next())
                .unwrap_or("9")
                .to_string();
            return match std::net::TcpStream::connect(format!("127.0.0.1:{port}")) {
                Ok(_) => Ok("{\"connected\": true}".to_string()),
                Err(e) => Ok(format!("{{\"denied\": \"{e}\"}}")),
            };
        }
        if wants(&input, "env") {
            let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
            let home = std::env::var("HOME").is_ok();
            return Ok(format!("{{\"vars\": {}, \"home\": {home}}}", vars.len()));
        }
        if wants(&input, "flood") {
            let line = "x".repeat(1023);
            for _ in 0..10_000 {
                println!("{line}");
            }
            return Ok("{\"flooded\": true}".to_string());
        }
        if wants(&input, "trap") {
            let v: Vec<u32> = Vec::new();
            return Ok(format!("{}", v[std::hint::black_box(3)]));
        }
        if wants(&input, "fail") {
            return Err("the guest says no".to_string());
        }
        if wants(&input, "log") {
            log("info", "hello from the guest");
            eprintln!("to stderr");
            println!("to stdout");
        }
        // Echo: wrap the input.
        Ok(format!("{{\"echo\": {input}}}"))
    }
}

export!(Node);
