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

/// How a field of a credential is entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Text,
    /// A whole number (a port).
    Number,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Several lines (PEM certificates).
    Lines,
}

/// One field of a credential's value, as the editor's form shows it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub key: &'static str,
    pub label: &'static str,
    pub input: Input,
    pub required: bool,
    /// Typed into a password box, never shown again.
    pub secret: bool,
    /// A placeholder: an example or the default.
    pub hint: &'static str,
}

/// A credential kind as the editor offers it: its name for people, what
/// it is for, its fields, and what testing it does.
#[derive(Debug, Clone, Copy)]
pub struct Form {
    pub kind: &'static str,
    pub title: &'static str,
    pub summary: &'static str,
    pub fields: &'static [Field],
    /// What "Test" does with it.
    pub test: &'static str,
    /// Whether the test calls a URL the user gives (HTTP credentials).
    pub test_needs_url: bool,
}

const fn field(key: &'static str, label: &'static str, hint: &'static str) -> Field {
    Field {
        key,
        label,
        input: Input::Text,
        required: true,
        secret: false,
        hint,
    }
}

const fn secret(key: &'static str, label: &'static str) -> Field {
    Field {
        secret: true,
        ..field(key, label, "")
    }
}

const fn optional(f: Field) -> Field {
    Field {
        required: false,
        ..f
    }
}

const DB_FIELDS: &[Field] = &[
    field("host", "Host", "db.example.com, or a socket path"),
    Field {
        input: Input::Number,
        ..optional(field("port", "Port", "the server's default"))
    },
    field("database", "Database", "app"),
    field("username", "User", ""),
    optional(secret("password", "Password")),
    Field {
        input: Input::Choice(&["disable", "prefer", "require", "verify-ca", "verify-full"]),
        ..optional(field("tls", "TLS", "prefer"))
    },
    Field {
        input: Input::Lines,
        ..optional(field(
            "ca_cert",
            "CA certificate (PEM)",
            "-----BEGIN CERTIFICATE-----",
        ))
    },
];

const HTTP_TEST: &str = "Calls a URL with it (GET) and expects a 2xx answer";

/// Every credential kind's form, in [`KINDS`] order.
pub const FORMS: &[Form] = &[
    Form {
        kind: "bearer",
        title: "Bearer token",
        summary: "Sends `Authorization: Bearer <token>` (HTTP request)",
        fields: &[secret("token", "Token")],
        test: HTTP_TEST,
        test_needs_url: true,
    },
    Form {
        kind: "basic",
        title: "User and password (HTTP Basic)",
        summary: "Sends `Authorization: Basic …` (HTTP request)",
        fields: &[
            field("username", "User", ""),
            secret("password", "Password"),
        ],
        test: HTTP_TEST,
        test_needs_url: true,
    },
    Form {
        kind: "header",
        title: "Header",
        summary: "Adds a header of your choice, such as an API key (HTTP request)",
        fields: &[
            field("name", "Header name", "X-API-Key"),
            secret("value", "Value"),
        ],
        test: HTTP_TEST,
        test_needs_url: true,
    },
    Form {
        kind: "query",
        title: "Query parameter",
        summary: "Adds a query parameter, such as `?api_key=…` (HTTP request)",
        fields: &[
            field("name", "Parameter name", "api_key"),
            secret("value", "Value"),
        ],
        test: HTTP_TEST,
        test_needs_url: true,
    },
    Form {
        kind: "smtp",
        title: "Mail server (SMTP)",
        summary: "Where Send email sends from",
        fields: &[
            field("host", "Host", "smtp.example.com"),
            Field {
                input: Input::Number,
                ..field("port", "Port", "587")
            },
            Field {
                input: Input::Choice(&["starttls", "tls", "none"]),
                ..field("security", "Security", "starttls")
            },
            optional(field("username", "User", "you@example.com")),
            optional(secret("password", "Password")),
        ],
        test: "Connects, starts TLS and logs in, without sending anything",
        test_needs_url: false,
    },
    Form {
        kind: "openai",
        title: "OpenAI-compatible server",
        summary: "For AI chat: OpenAI, Ollama, llama.cpp, vLLM",
        fields: &[
            field("base_url", "Base URL", "https://api.openai.com/v1"),
            optional(secret("api_key", "API key")),
        ],
        test: "Lists the server's models (costs nothing)",
        test_needs_url: false,
    },
    Form {
        kind: "postgres",
        title: "PostgreSQL",
        summary: "A PostgreSQL server for Database query",
        fields: DB_FIELDS,
        test: "Connects, logs in and runs `SELECT 1`",
        test_needs_url: false,
    },
    Form {
        kind: "mysql",
        title: "MySQL or MariaDB",
        summary: "A MySQL or MariaDB server for Database query",
        fields: DB_FIELDS,
        test: "Connects, logs in and runs `SELECT 1`",
        test_needs_url: false,
    },
];

/// The form of credential kind `kind`.
pub fn form(kind: &str) -> Option<&'static Form> {
    FORMS.iter().find(|f| f.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A value for a field of each input, as the form would send it.
    fn sample(f: &Field) -> Value {
        match f.input {
            Input::Number => json!(25),
            Input::Choice(words) => json!(words[0]),
            Input::Text if f.key.ends_with("url") => json!("https://example.com/v1"),
            Input::Text | Input::Lines => json!("x"),
        }
    }

    /// The forms and the shapes stay one: every kind has a form, a value with
    /// only the required fields is accepted and one without any of them is
    /// refused, naming it; a value with every field is accepted too.
    #[test]
    fn forms_match_the_shapes() {
        let kinds: Vec<&str> = FORMS.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, KINDS);
        for form in FORMS {
            let of = |pick: &dyn Fn(&Field) -> bool| -> Value {
                Value::Object(
                    form.fields
                        .iter()
                        .filter(|f| pick(f))
                        .map(|f| (f.key.to_string(), sample(f)))
                        .collect(),
                )
            };
            assert_eq!(
                check(form.kind, &of(&|f| f.required)),
                Ok(()),
                "{}",
                form.kind
            );
            assert_eq!(check(form.kind, &of(&|_| true)), Ok(()), "{}", form.kind);
            for missing in form.fields.iter().filter(|f| f.required) {
                let err =
                    check(form.kind, &of(&|f| f.required && f.key != missing.key)).unwrap_err();
                assert!(err.contains(missing.key), "{}: {err}", form.kind);
            }
            for f in form.fields {
                if let Input::Choice(words) = f.input {
                    for w in words {
                        let mut v = of(&|f| f.required);
                        v[f.key] = json!(w);
                        assert_eq!(
                            check(form.kind, &v),
                            Ok(()),
                            "{}.{} = {w}",
                            form.kind,
                            f.key
                        );
                    }
                }
            }
        }
    }

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
