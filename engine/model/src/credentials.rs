//! Credential kinds and the shape of their values (checked before a value is
//! stored; values themselves live encrypted in the engine's vault).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Every credential kind.
pub const KINDS: &[&str] = &[
    "bearer", "basic", "header", "query", "smtp", "openai", "postgres", "mysql",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Bearer {
    token: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Basic {
    username: String,
    password: String,
}

/// `header` and `query`: a name and a value to add to requests.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct NameValue {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Smtp {
    host: String,
    port: u16,
    security: SmtpSecurity,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum SmtpSecurity {
    None,
    Starttls,
    Tls,
}

/// An OpenAI-compatible server (`ai.chat`): where, and its key if it needs one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct OpenAi {
    base_url: String,
    #[serde(default)]
    api_key: Option<String>,
}

/// A database server (`db.query`): `postgres` and `mysql` (MariaDB too).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct DbServer {
    /// A host name or address, or a Unix socket path (starting with `/`).
    pub host: String,
    /// Default 5432 (PostgreSQL) or 3306 (MySQL).
    #[serde(default)]
    pub port: Option<u16>,
    pub database: String,
    pub username: String,
    #[serde(default)]
    pub password: Option<String>,
    /// `disable`, `prefer` (default), `require`, `verify-ca`, `verify-full`.
    #[serde(default)]
    pub tls: Option<DbTls>,
    /// PEM certificates of the authority that signed the server's, for
    /// `verify-ca` / `verify-full` when it is not a system-trusted one.
    #[serde(default)]
    pub ca_cert: Option<String>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DbTls {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

fn shape<T: DeserializeOwned>(value: &Value) -> Result<(), String> {
    serde_path_to_error::deserialize::<_, T>(value)
        .map(|_| ())
        .map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.into_inner().to_string()
            } else {
                format!("{path}: {}", e.into_inner())
            }
        })
}

/// Checks a credential value against its kind; the error names the field.
/// It never echoes the value.
pub fn check(kind: &str, value: &Value) -> Result<(), String> {
    let checked = match kind {
        "bearer" => shape::<Bearer>(value),
        "basic" => shape::<Basic>(value),
        "header" | "query" => shape::<NameValue>(value),
        "smtp" => shape::<Smtp>(value),
        "openai" => shape::<OpenAi>(value).and_then(|()| {
            let url = value["base_url"].as_str().unwrap_or_default();
            if url.starts_with("http://") || url.starts_with("https://") {
                Ok(())
            } else {
                Err("base_url: must start with http:// or https://".to_string())
            }
        }),
        "postgres" | "mysql" => shape::<DbServer>(value).and_then(|()| {
            let host = value["host"].as_str().unwrap_or_default();
            if host.trim().is_empty() {
                Err("host: must name the server".to_string())
            } else {
                Ok(())
            }
        }),
        other => {
            return Err(format!(
                "unknown credential kind `{other}` (kinds: {})",
                KINDS.join(", ")
            ));
        }
    };
    // serde's messages can quote the offending string: keep only the field and reason.
    checked.map_err(|e| match e.find(": invalid type") {
        Some(_) => e
            .split(", expected")
            .next()
            .unwrap_or(&e)
            .split(" \"")
            .next()
            .unwrap_or(&e)
            .to_string(),
        None => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes() {
        assert_eq!(check("bearer", &json!({"token": "t"})), Ok(()));
        assert_eq!(
            check("openai", &json!({"base_url": "http://127.0.0.1:11434/v1"})),
            Ok(())
        );
        assert_eq!(
            check(
                "openai",
                &json!({"base_url": "https://api.openai.com/v1", "api_key": "sk-1"})
            ),
            Ok(())
        );
        assert_eq!(
            check("openai", &json!({"base_url": "file:///etc"})),
            Err("base_url: must start with http:// or https://".into())
        );
        assert_eq!(
            check(
                "smtp",
                &json!({"host": "h", "port": 25, "security": "starttls"})
            ),
            Ok(())
        );
        assert_eq!(
            check(
                "postgres",
                &json!({"host": "db", "database": "app", "username": "u", "password": "p",
                        "tls": "verify-full"})
            ),
            Ok(())
        );
        assert_eq!(
            check(
                "mysql",
                &json!({"host": "", "database": "a", "username": "u"})
            ),
            Err("host: must name the server".into())
        );
        assert!(
            check(
                "postgres",
                &json!({"host": "db", "database": "a", "username": "u", "tls": "always"})
            )
            .unwrap_err()
            .starts_with("tls: unknown variant"),
        );
        assert_eq!(
            check("basic", &json!({"username": "u"})),
            Err("missing field `password`".into())
        );
        assert!(
            check("header", &json!({"name": "X", "value": "v", "extra": 1}))
                .unwrap_err()
                .contains("unknown field `extra`")
        );
        assert!(
            check("oauth", &json!({}))
                .unwrap_err()
                .starts_with("unknown credential kind `oauth`")
        );
        let err = check(
            "smtp",
            &json!({"host": "h", "port": "25", "security": "tls"}),
        )
        .unwrap_err();
        assert!(err.starts_with("port: invalid type"), "{err}");
    }
}
