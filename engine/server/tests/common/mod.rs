//! A real trigger port for tests: an engine in a temp dir, served on
//! 127.0.0.1:0, with a real HTTP client and WebSocket connections.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use sluice_runtime::{Engine, Options};

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Server {
    pub _dir: tempfile::TempDir,
    pub base: String,
    pub token: String,
    pub client: reqwest::Client,
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn server_with(configure: impl FnOnce(&mut sluice_server::Options)) -> Server {
    server_full(configure, None).await
}

/// A server whose engine is also a peer named `peer` (its endpoint on
/// loopback, relays off), when given.
pub async fn server_full(
    configure: impl FnOnce(&mut sluice_server::Options),
    peer: Option<&str>,
) -> Server {
    server_engine(|_| {}, configure, peer).await
}

/// A server whose engine's options `engine` adjusts.
pub async fn server_engine(
    engine: impl FnOnce(&mut Options),
    configure: impl FnOnce(&mut sluice_server::Options),
    peer: Option<&str>,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    // One compile cache for every test server: the JavaScript runtime is
    // pre-initialized and compiled once, not in every new data dir.
    let mut options = Options {
        // (Examples that share this module have no CARGO_TARGET_TMPDIR.)
        wasm_cache: Some(
            option_env!("CARGO_TARGET_TMPDIR")
                .map_or_else(std::env::temp_dir, std::path::PathBuf::from)
                .join("wasm-cache"),
        ),
        ..Options::default()
    };
    engine(&mut options);
    let engine = Engine::open(dir.path(), options).await.unwrap();
    let token = sluice_server::ensure_token(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut options = sluice_server::Options::new(addr);
    configure(&mut options);
    if let Some(name) = peer {
        let peers = sluice_peers::Peers::start(
            engine.clone(),
            dir.path(),
            sluice_peers::PeersOptions {
                listen: Some("127.0.0.1:0".parse().unwrap()),
                relays: sluice_peers::Relays::None,
                name: name.to_string(),
            },
        )
        .await
        .unwrap();
        options.peers = Some(peers.into());
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let t = token.clone();
    tokio::spawn(async move {
        sluice_server::serve(listener, engine, &t, options, async {
            stopped.await.ok();
        })
        .await
        .unwrap();
    });
    Server {
        _dir: dir,
        base: format!("http://{addr}"),
        token,
        client: {
            sluice_nodes::http::install_crypto_provider();
            reqwest::Client::builder()
        }
        // Generous: the first jq or code.js step of a fresh machine prepares
        // the script runtime (tens of seconds in a debug build).
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap(),
        addr,
        _stop: stop,
    }
}

pub async fn server() -> Server {
    server_with(|_| {}).await
}

impl Server {
    /// A WebSocket to `/api/v1/ws` with the token (`query` without `?`).
    pub async fn ws(&self, query: &str) -> Socket {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{}/api/v1/ws?{query}", self.addr)
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.token).parse().unwrap(),
        );
        tokio_tungstenite::connect_async(req).await.unwrap().0
    }

    pub fn api(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}/api/v1{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Stores `wf` and publishes it (what its webhooks and runs by id run).
    pub async fn put_workflow(&self, wf: Value) {
        let id = wf["id"].as_str().unwrap().to_string();
        let r = self
            .api(
                reqwest::Method::PUT,
                &format!("/workflows/{id}?publish=true"),
            )
            .json(&wf)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }

    pub fn hook(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}/hook/{path}", self.base))
    }
}

pub async fn json_of(r: reqwest::Response) -> Value {
    r.json().await.unwrap()
}
