//! The editor's door: signing in with a one-time code for a session the
//! page keeps in its origin's storage and sends as a header (never a
//! cookie, which other ports of the host would receive), and its static
//! files.

mod common;

use std::sync::Arc;

use reqwest::{Method, StatusCode, header};

#[tokio::test]
async fn a_one_time_code_signs_a_browser_in() {
    let codes = Arc::new(sluice_server::Codes::default());
    let code = codes.issue();
    let ui = tempfile::tempdir().unwrap();
    std::fs::write(
        ui.path().join("index.html"),
        "<!doctype html><title>editor</title>",
    )
    .unwrap();
    std::fs::create_dir(ui.path().join("pkg")).unwrap();
    std::fs::write(ui.path().join("pkg/sluice_bg.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let dir = ui.path().to_path_buf();
    let s = {
        let codes = codes.clone();
        common::server_with(move |o| {
            o.codes = codes;
            o.ui_dir = Some(dir);
        })
        .await
    };
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // Without a session or token the API refuses.
    let r = no_redirects
        .get(format!("{}/api/v1/workflows", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // The code: a page that keeps the session in this origin's storage and
    // goes on to the editor. No session cookie (only the clearing of one
    // an earlier version set), and only its own script may run.
    let r = no_redirects
        .get(format!(
            "{}/ui/login?code={code}&then=/%23/w/orders",
            s.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let set = r.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        set.starts_with("sluice_session=;") && set.contains("Max-Age=0"),
        "{set}"
    );
    let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.starts_with("default-src 'none'; script-src 'nonce-"),
        "{csp}"
    );
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    let page = r.text().await.unwrap();
    let session = page
        .split("localStorage.setItem(\"sluice_session\", \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no session in {page}"))
        .to_string();
    assert!(page.contains("location.replace(\"/#/w/orders\")"), "{page}");

    // The session works like the token, for the API and (as a subprotocol)
    // the WebSocket.
    let r = no_redirects
        .get(format!("{}/api/v1/workflows", s.base))
        .bearer_auth(&session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{}/api/v1/ws?events=none", s.addr)
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "sec-websocket-protocol",
            format!("sluice, sluice.session.{session}").parse().unwrap(),
        );
        req.headers_mut()
            .insert("origin", format!("http://{}", s.addr).parse().unwrap());
        let (_, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert_eq!(resp.headers()["sec-websocket-protocol"], "sluice");
    }
    // A cookie is no credential any more.
    let r = no_redirects
        .get(format!("{}/api/v1/workflows", s.base))
        .header(header::COOKIE, format!("sluice_session={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A page elsewhere cannot use it: the Origin check still applies.
    let r = no_redirects
        .request(Method::DELETE, format!("{}/api/v1/workflows/x", s.base))
        .bearer_auth(&session)
        .header(header::ORIGIN, "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // A forged or damaged session is refused.
    let forged = format!("{}0", &session[..session.len() - 1]);
    let forged = if forged == session {
        format!("{}1", &session[..session.len() - 1])
    } else {
        forged
    };
    let r = no_redirects
        .get(format!("{}/api/v1/workflows", s.base))
        .bearer_auth(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // A code works once.
    let r = no_redirects
        .get(format!("{}/ui/login?code={code}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get(header::SET_COOKIE).is_none());
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("used already or has expired")
    );

    // The files, with their types; nothing outside the folder.
    let r = no_redirects
        .get(format!("{}/", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    assert!(r.text().await.unwrap().contains("<title>editor</title>"));
    let r = no_redirects
        .get(format!("{}/pkg/sluice_bg.wasm", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[header::CONTENT_TYPE], "application/wasm");
    for path in [
        "/pkg/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/missing.js",
    ] {
        let r = no_redirects
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    // A foreign Host (DNS rebinding) gets nothing.
    let r = no_redirects
        .get(format!("{}/", s.base))
        .header(header::HOST, "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn without_a_built_editor_the_page_says_how_to_build_it() {
    let s = common::server().await;
    let r = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().await.unwrap().contains("cargo xtask run"));
}

#[tokio::test]
async fn an_editor_built_into_the_binary_is_served() {
    static FILES: &[(&str, &[u8])] = &[
        ("index.html", b"<!doctype html><title>embedded</title>"),
        ("pkg/sluice_bg.wasm", b"\0asm\x01\0\0\0"),
    ];
    let s = common::server_with(|o| o.ui_embedded = FILES).await;
    let r = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert!(r.text().await.unwrap().contains("embedded"));
    let r = s
        .client
        .get(format!("{}/pkg/sluice_bg.wasm", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/wasm");
    assert_eq!(&r.bytes().await.unwrap()[..], b"\0asm\x01\0\0\0");
    for missing in ["/nope.js", "/pkg", "/pkg/other.wasm"] {
        let r = s
            .client
            .get(format!("{}{missing}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{missing}");
    }
    // A directory on disk, when given, wins over the embedded build.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "from disk").unwrap();
    let ui = dir.path().to_path_buf();
    let s = common::server_with(move |o| {
        o.ui_embedded = FILES;
        o.ui_dir = Some(ui);
    })
    .await;
    let r = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "from disk");
}

/// `POST /api/v1/sign-in-links`: what `sluice open` asks the running
/// engine for. Token holders only; each link works once and lands only on
/// this server.
#[tokio::test]
async fn a_token_holder_gets_fresh_sign_in_links() {
    let s = common::server().await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirects
        .post(format!("{}/api/v1/sign-in-links", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    for (body, lands) in [
        (None, "location.replace(\"/\")"),
        (
            Some(serde_json::json!({"then": "/#/w/orders"})),
            "location.replace(\"/#/w/orders\")",
        ),
        // Never another origin.
        (
            Some(serde_json::json!({"then": "//evil.example/"})),
            "location.replace(\"/\")",
        ),
    ] {
        let mut req = s.api(Method::POST, "/sign-in-links");
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        let link: sluice_api::SignInLink = r.json().await.unwrap();
        assert_eq!(link.url, format!("{}{}", s.base, link.path));
        assert_eq!(link.expires_in_secs, 24 * 3600);
        let r = no_redirects.get(&link.url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let page = r.text().await.unwrap();
        assert!(page.contains(lands), "{page}");
        let r = no_redirects.get(&link.url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
    let r = s
        .api(Method::POST, "/sign-in-links")
        .json(&serde_json::json!({"then": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}
