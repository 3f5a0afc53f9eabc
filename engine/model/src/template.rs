//! Templates in node configs (minijinja syntax). A string that is exactly
//! `{{ expr }}` evaluates to the JSON value of `expr`; any other string with
//! `{{`/`{%` is rendered to text. Evaluation is bounded by fuel and by size.
//!
//! Messages are shared (`Arc<Value>`) and exposed to the template engine as
//! lazy views, so a 50 MB input is never copied to evaluate `input.id`.

use std::io;
use std::sync::{Arc, LazyLock};

use minijinja::value::{Enumerator, Object, ObjectRepr, Value as JValue};
use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

/// Fuel for one evaluation (minijinja instructions).
pub const FUEL: u64 = 200_000;
/// Largest output of one evaluation, in bytes of text or of serialized JSON.
pub const MAX_OUTPUT: usize = 16 * 1024 * 1024;

static ENV: LazyLock<Environment<'static>> = LazyLock::new(|| new_env(Missing::Null));
static ENV_STRICT: LazyLock<Environment<'static>> = LazyLock::new(|| new_env(Missing::Error));

fn new_env(missing: Missing) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_undefined_behavior(match missing {
        Missing::Null => UndefinedBehavior::Chainable,
        Missing::Error => UndefinedBehavior::Strict,
    });
    env.set_recursion_limit(64);
    env
}

/// What a template makes of a field that is not there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Missing {
    /// Null (and nothing, in text).
    #[default]
    Null,
    /// An error that names the template and the path: a workflow's
    /// `settings.strict`, so that a typo is not a silent null.
    Error,
}

/// A text template parsed once: it lives in an environment of its own, the
/// only way minijinja keeps an owned, compiled template.
#[derive(Debug)]
pub struct Text {
    env: Environment<'static>,
    missing: Missing,
    source: String,
}

/// A lone `{{ expr }}`, compiled.
#[derive(Debug)]
pub struct Expr {
    expr: minijinja::Expression<'static, 'static>,
    missing: Missing,
    source: String,
}

/// A simple path (`input.a.b`), read without the template engine.
#[derive(Debug)]
pub struct PathExpr {
    root: Root,
    segs: Vec<PathSeg>,
    /// Set when a missing field is an error: the template, to name it.
    strict: Option<String>,
}

const TEXT_NAME: &str = "config";

/// A template error: syntax, evaluation, or a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("{0}")]
    Eval(String),
    #[error("template ran out of fuel (more than {FUEL} steps): is it looping?")]
    OutOfFuel,
    #[error("template output is larger than {} MiB", MAX_OUTPUT / (1024 * 1024))]
    TooLarge,
    /// A field the template reads is not there (strict mode).
    #[error(
        "`{path}` is missing, in `{template}` (strict mode: a missing field is an error, not null)"
    )]
    Missing { template: String, path: String },
}

impl Error {
    fn from_jinja(e: &minijinja::Error, syntax: bool) -> Error {
        if e.kind() == minijinja::ErrorKind::OutOfFuel {
            return Error::OutOfFuel;
        }
        let mut msg = e
            .detail()
            .map(str::to_string)
            .unwrap_or_else(|| e.kind().to_string());
        if let Some(line) = e.line() {
            msg = format!("{msg} (template line {line})");
        }
        // The writer below reports overflow as an I/O error.
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            if s.to_string() == TOO_LARGE {
                return Error::TooLarge;
            }
            src = s.source();
        }
        if syntax {
            Error::Syntax(msg)
        } else {
            Error::Eval(msg)
        }
    }
}

const TOO_LARGE: &str = "sluice: template output too large";

/// A compiled config value: templates parsed once, evaluated per message.
#[derive(Debug)]
pub enum Compiled {
    /// No template inside: used as is.
    Literal(Value),
    /// A simple path (`input.a.b`, `nodes.x.y`): evaluated without the engine.
    Path(Box<PathExpr>),
    /// A lone `{{ expr }}`.
    Expr(Box<Expr>),
    /// Text with interpolations or blocks.
    Text(Box<Text>),
    Array(Vec<Compiled>),
    Object(Vec<(String, Compiled)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    Input,
    Nodes,
    Run,
    Vars,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

/// Whether a string contains template syntax at all.
pub fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

/// Checks a string's template syntax.
pub fn check(s: &str) -> Result<(), Error> {
    compile_str(s, Missing::Null).map(|_| ())
}

/// The node ids a template string reads as `nodes.<id>` (none for a string
/// that is not a template, or does not parse: syntax is reported by
/// [`check`]).
pub fn node_refs(s: &str) -> Vec<String> {
    if !is_template(s) || check_block_lengths(s).is_err() {
        return Vec::new();
    }
    let env = new_env(Missing::Null);
    let Ok(template) = env.template_from_str(s) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = template
        .undeclared_variables(true)
        .into_iter()
        .filter_map(|v| {
            let rest = v.strip_prefix("nodes.")?;
            Some(rest.split('.').next().unwrap_or(rest).to_string())
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Compiles every string inside a config value, skipping `raw` top-level keys.
pub fn compile(v: &Value, raw: &[&str], missing: Missing) -> Result<Compiled, (String, Error)> {
    compile_at(v, raw, "", missing)
}

fn compile_at(
    v: &Value,
    raw: &[&str],
    path: &str,
    missing: Missing,
) -> Result<Compiled, (String, Error)> {
    Ok(match v {
        Value::String(s) => compile_str(s, missing).map_err(|e| (path.to_string(), e))?,
        Value::Array(items) if items.iter().any(has_template) => Compiled::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| compile_at(x, &[], &format!("{path}[{i}]"), missing))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map)
            if map
                .iter()
                .any(|(k, x)| !raw.contains(&k.as_str()) && has_template(x)) =>
        {
            Compiled::Object(
                map.iter()
                    .map(|(k, x)| {
                        let sub = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        let c = if raw.contains(&k.as_str()) {
                            Compiled::Literal(x.clone())
                        } else {
                            compile_at(x, &[], &sub, missing)?
                        };
                        Ok((k.clone(), c))
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        other => Compiled::Literal(other.clone()),
    })
}

/// Whether a config value has a template anywhere inside.
pub fn has_template(v: &Value) -> bool {
    match v {
        Value::String(s) => is_template(s),
        Value::Array(items) => items.iter().any(has_template),
        Value::Object(map) => map.values().any(has_template),
        _ => false,
    }
}

/// Most tokens in one `{{ }}` or `{% %}` block. minijinja's parser
/// recurses without a depth guard through unary operators (`not not …`,
/// `- - …`), and its code generator and the syntax tree's drop through
/// operator and filter chains: 100,000 `not`s overflow any thread's stack.
/// Statements and brackets nest at most 150 deep (minijinja's own guard), so
/// bounding the length of one block bounds every nesting in a template, far
/// from the stack's end (a thousand levels fit on 1 MiB in a debug build;
/// tested). Real expressions are a few dozen tokens.
pub const MAX_BLOCK_TOKENS: usize = 1_000;

/// Refuses a block longer than [`MAX_BLOCK_TOKENS`], before minijinja parses
/// it. Lexing is flat (no recursion); lexing errors are left for the parser
/// to report.
fn check_block_lengths(s: &str) -> Result<(), Error> {
    use minijinja::machinery::{Token, tokenize};
    let mut tokens = 0usize;
    for item in tokenize(s, false, minijinja::syntax::SyntaxConfig::default()) {
        let Ok((token, span)) = item else {
            return Ok(());
        };
        match token {
            Token::VariableStart | Token::BlockStart => tokens = 0,
            Token::VariableEnd | Token::BlockEnd | Token::TemplateData(_) => {}
            _ => {
                tokens += 1;
                if tokens > MAX_BLOCK_TOKENS {
                    return Err(Error::Syntax(format!(
                        "expression too long: more than {MAX_BLOCK_TOKENS} tokens in one \
                         {{{{ }}}} or {{% %}} block (template line {})",
                        span.start_line
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Compiles one string.
pub fn compile_str(s: &str, missing: Missing) -> Result<Compiled, Error> {
    if !is_template(s) {
        return Ok(Compiled::Literal(Value::String(s.to_string())));
    }
    check_block_lengths(s)?;
    if let Some(expr) = lone_expression(s) {
        if let Some((root, segs)) = simple_path(expr) {
            return Ok(Compiled::Path(Box::new(PathExpr {
                root,
                segs,
                strict: (missing == Missing::Error).then(|| s.to_string()),
            })));
        }
        let env = match missing {
            Missing::Null => &*ENV,
            Missing::Error => &*ENV_STRICT,
        };
        let compiled = env
            .compile_expression_owned(expr.to_string())
            .map_err(|e| Error::from_jinja(&e, true))?;
        return Ok(Compiled::Expr(Box::new(Expr {
            expr: compiled,
            missing,
            source: s.to_string(),
        })));
    }
    // Parsed now, once: syntax errors surface at validation time.
    let mut env = new_env(missing);
    env.add_template_owned(TEXT_NAME, s.to_string())
        .map_err(|e| Error::from_jinja(&e, true))?;
    Ok(Compiled::Text(Box::new(Text {
        env,
        missing,
        source: s.to_string(),
    })))
}

/// `{{ expr }}` with nothing around it (and no other tags inside).
fn lone_expression(s: &str) -> Option<&str> {
    let inner = s.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner);
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    Some(inner.trim())
}

/// `input`, `input.a.b`, `nodes.fetch.body`, `input.items[0]`: nothing but names and indices.
fn simple_path(expr: &str) -> Option<(Root, Vec<PathSeg>)> {
    let mut segs = Vec::new();
    let mut rest = expr;
    let ident_end = |s: &str| {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    let n = ident_end(rest);
    let root = match &rest[..n] {
        "input" => Root::Input,
        "nodes" => Root::Nodes,
        "run" => Root::Run,
        "vars" => Root::Vars,
        _ => return None,
    };
    rest = &rest[n..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let n = ident_end(r);
            if n == 0 || r.as_bytes()[0].is_ascii_digit() {
                return None;
            }
            segs.push(PathSeg::Key(r[..n].to_string()));
            rest = &r[n..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let close = r.find(']')?;
            let idx = &r[..close];
            if let Ok(i) = idx.parse::<usize>() {
                segs.push(PathSeg::Index(i));
            } else if let Some(k) = idx.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
                if k.contains(['"', '\\']) {
                    return None;
                }
                segs.push(PathSeg::Key(k.to_string()));
            } else {
                return None;
            }
            rest = &r[close + 1..];
        } else {
            return None;
        }
    }
    if root == Root::Nodes && segs.is_empty() {
        return None;
    }
    Some((root, segs))
}

/// Outputs of earlier nodes, looked up by id when a template asks.
pub trait NodeOutputs: Send + Sync + std::fmt::Debug {
    fn get(&self, id: &str) -> Option<Arc<Value>>;
    fn ids(&self) -> Vec<String>;
}

/// No earlier outputs.
#[derive(Debug)]
pub struct NoOutputs;

impl NodeOutputs for NoOutputs {
    fn get(&self, _: &str) -> Option<Arc<Value>> {
        None
    }
    fn ids(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What a template can see.
#[derive(Debug, Clone)]
pub struct Scope {
    pub input: Arc<Value>,
    pub nodes: Arc<dyn NodeOutputs>,
    pub run: Arc<Value>,
    pub vars: Arc<Value>,
}

impl Scope {
    /// A scope with only an input (tests, previews).
    pub fn with_input(input: Value) -> Scope {
        Scope {
            input: Arc::new(input),
            nodes: Arc::new(NoOutputs),
            run: Arc::new(Value::Object(Map::new())),
            vars: Arc::new(Value::Object(Map::new())),
        }
    }

    fn context(&self) -> JValue {
        JValue::from_object(ScopeObj(self.clone()))
    }
}

impl Compiled {
    /// Whether evaluation returns the value unchanged (no template inside).
    pub fn is_literal(&self) -> bool {
        matches!(self, Compiled::Literal(_))
    }

    /// Evaluates against a scope. The result of a lone `{{ input }}` shares
    /// the input (no copy).
    pub fn eval(&self, scope: &Scope) -> Result<Arc<Value>, Error> {
        if let Compiled::Path(p) = self {
            return p.eval(scope);
        }
        self.eval_owned(scope).map(Arc::new)
    }

    fn eval_owned(&self, scope: &Scope) -> Result<Value, Error> {
        Ok(match self {
            Compiled::Literal(v) => v.clone(),
            Compiled::Path(p) => {
                let shared = p.eval(scope)?;
                Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone())
            }
            Compiled::Expr(e) => {
                let v = e.expr.eval(scope.context()).map_err(|err| {
                    missing_error(&err, e.missing, &e.source, scope)
                        .unwrap_or_else(|| Error::from_jinja(&err, false))
                })?;
                if e.missing == Missing::Error && v.is_undefined() {
                    return Err(Error::Missing {
                        template: e.source.clone(),
                        path: missing_paths(&e.source, scope)
                            .into_iter()
                            .next()
                            .unwrap_or_else(|| "a value".into()),
                    });
                }
                to_json(&v)?
            }
            Compiled::Text(text) => Value::String(render_text(text, scope)?),
            Compiled::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|c| c.eval_owned(scope))
                    .collect::<Result<_, _>>()?,
            ),
            Compiled::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, c)| Ok((k.clone(), c.eval_owned(scope)?)))
                    .collect::<Result<_, Error>>()?,
            ),
        })
    }
}

impl PathExpr {
    fn eval(&self, scope: &Scope) -> Result<Arc<Value>, Error> {
        match lookup(scope, self.root, &self.segs) {
            Ok(v) => Ok(v),
            Err(found) => match &self.strict {
                None => Ok(Arc::new(Value::Null)),
                Some(template) => Err(Error::Missing {
                    template: template.clone(),
                    path: path_text(self.root, &self.segs[..=found]),
                }),
            },
        }
    }
}

/// The value at `root` + `segs`, or how many segments were found before
/// one was missing.
fn lookup(scope: &Scope, root: Root, segs: &[PathSeg]) -> Result<Arc<Value>, usize> {
    let (base, rest, skipped) = match root {
        Root::Input => (scope.input.clone(), segs, 0),
        Root::Run => (scope.run.clone(), segs, 0),
        Root::Vars => (scope.vars.clone(), segs, 0),
        Root::Nodes => match segs.first() {
            Some(PathSeg::Key(id)) => match scope.nodes.get(id) {
                Some(v) => (v, &segs[1..], 1),
                None => return Err(0),
            },
            _ => return Err(0),
        },
    };
    if rest.is_empty() {
        return Ok(base);
    }
    let mut cur: &Value = &base;
    for (i, seg) in rest.iter().enumerate() {
        let next = match (seg, cur) {
            (PathSeg::Key(k), Value::Object(m)) => m.get(k),
            (PathSeg::Index(i), Value::Array(a)) => a.get(*i),
            _ => None,
        };
        match next {
            Some(v) => cur = v,
            None => return Err(skipped + i),
        }
    }
    Ok(Arc::new(cur.clone()))
}

/// `input.a[0].b` as a template writes it.
fn path_text(root: Root, segs: &[PathSeg]) -> String {
    let mut out = match root {
        Root::Input => "input",
        Root::Nodes => "nodes",
        Root::Run => "run",
        Root::Vars => "vars",
    }
    .to_string();
    for seg in segs {
        match seg {
            PathSeg::Key(k) if is_identifier(k) => {
                out.push('.');
                out.push_str(k);
            }
            PathSeg::Key(k) => {
                out.push('[');
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(']');
            }
            PathSeg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A name a template can write after a dot.
pub fn is_identifier(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The paths a template reads (`input.a.b`, `nodes.x.y`) that are not in
/// `scope`, each cut where it stops being there (`input.body.totl`, not
/// `input.body.totl.x`). What the editor marks, and what strict mode names.
pub fn missing_paths(s: &str, scope: &Scope) -> Vec<String> {
    if !is_template(s) || check_block_lengths(s).is_err() {
        return Vec::new();
    }
    let env = new_env(Missing::Null);
    let Ok(template) = env.template_from_str(s) else {
        return Vec::new();
    };
    let mut names: Vec<String> = template.undeclared_variables(true).into_iter().collect();
    names.sort();
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let Some((root, segs)) = simple_path(&name) else {
            // A name the context does not have at all (`inptu.x`), unless
            // it is one of minijinja's own.
            let first = name.split('.').next().unwrap_or(&name);
            if !BUILTIN_NAMES.contains(&first) && !out.iter().any(|o| o == first) {
                out.push(first.to_string());
            }
            continue;
        };
        if let Err(found) = lookup(scope, root, &segs) {
            let cut = path_text(root, &segs[..(found + 1).min(segs.len())]);
            if !out.contains(&cut) {
                out.push(cut);
            }
        }
    }
    out
}

/// Names minijinja provides itself (functions, and what blocks define).
const BUILTIN_NAMES: &[&str] = &[
    "range",
    "dict",
    "namespace",
    "debug",
    "loop",
    "self",
    "super",
    "caller",
    "varargs",
    "kwargs",
    "true",
    "false",
    "none",
    "True",
    "False",
    "None",
];

/// A minijinja "undefined" error in strict mode, as the path it was about.
fn missing_error(
    e: &minijinja::Error,
    missing: Missing,
    source: &str,
    scope: &Scope,
) -> Option<Error> {
    (missing == Missing::Error && e.kind() == minijinja::ErrorKind::UndefinedError).then(|| {
        Error::Missing {
            template: source.to_string(),
            path: missing_paths(source, scope)
                .into_iter()
                .next()
                .unwrap_or_else(|| "a value".into()),
        }
    })
}

fn render_text(text: &Text, scope: &Scope) -> Result<String, Error> {
    let tmpl = text
        .env
        .get_template(TEXT_NAME)
        .map_err(|e| Error::from_jinja(&e, true))?;
    let mut out = Bounded(Vec::new());
    tmpl.render_captured_to(scope.context(), &mut out)
        .map_err(|e| {
            missing_error(&e, text.missing, &text.source, scope)
                .unwrap_or_else(|| Error::from_jinja(&e, false))
        })?;
    String::from_utf8(out.0).map_err(|e| Error::Eval(e.to_string()))
}

struct Bounded(Vec<u8>);

impl io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUTPUT {
            return Err(io::Error::other(TOO_LARGE));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Converts an engine value to JSON, bounded in size.
fn to_json(v: &JValue) -> Result<Value, Error> {
    let mut budget = MAX_OUTPUT;
    to_json_bounded(v, &mut budget, 0)
}

fn to_json_bounded(v: &JValue, budget: &mut usize, depth: usize) -> Result<Value, Error> {
    use minijinja::value::ValueKind;
    if depth > 128 {
        return Err(Error::Eval("value nested more than 128 levels deep".into()));
    }
    if let Some(view) = v.downcast_object_ref::<JsonView>() {
        let target = view.get();
        spend(budget, approx_size(target))?;
        return Ok(target.clone());
    }
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => Value::Null,
        ValueKind::Bool => Value::Bool(v.is_true()),
        ValueKind::Number => {
            spend(budget, 8)?;
            serde_json::to_value(v).map_err(|e| Error::Eval(e.to_string()))?
        }
        ValueKind::String | ValueKind::Bytes | ValueKind::Plain => {
            let s = v.to_string();
            spend(budget, s.len())?;
            Value::String(s)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let iter = v.try_iter().map_err(|e| Error::Eval(e.to_string()))?;
            let mut out = Vec::new();
            for item in iter {
                spend(budget, 1)?;
                out.push(to_json_bounded(&item, budget, depth + 1)?);
            }
            Value::Array(out)
        }
        ValueKind::Map => {
            let iter = v.try_iter().map_err(|e| Error::Eval(e.to_string()))?;
            let mut out = Map::new();
            for key in iter {
                let item = v.get_item(&key).map_err(|e| Error::Eval(e.to_string()))?;
                let k = key
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| key.to_string());
                spend(budget, k.len() + 1)?;
                out.insert(k, to_json_bounded(&item, budget, depth + 1)?);
            }
            Value::Object(out)
        }
        _ => Value::String(v.to_string()),
    })
}

fn spend(budget: &mut usize, n: usize) -> Result<(), Error> {
    *budget = budget.checked_sub(n).ok_or(Error::TooLarge)?;
    Ok(())
}

fn approx_size(v: &Value) -> usize {
    // Cheap upper-bound-ish estimate; only used against the output budget.
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(m) => {
            2 + m
                .iter()
                .map(|(k, v)| k.len() + 3 + approx_size(v))
                .sum::<usize>()
        }
        _ => 8,
    }
}

/// The template context: `input`, `nodes`, `run`, `vars`.
#[derive(Debug)]
struct ScopeObj(Scope);

impl Object for ScopeObj {
    fn get_value(self: &Arc<Self>, key: &JValue) -> Option<JValue> {
        Some(match key.as_str()? {
            "input" => JsonView::root(self.0.input.clone()),
            "run" => JsonView::root(self.0.run.clone()),
            "vars" => JsonView::root(self.0.vars.clone()),
            "nodes" => JValue::from_object(NodesObj(self.0.nodes.clone())),
            _ => return None,
        })
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["input", "nodes", "run", "vars"])
    }
}

#[derive(Debug)]
struct NodesObj(Arc<dyn NodeOutputs>);

impl Object for NodesObj {
    fn get_value(self: &Arc<Self>, key: &JValue) -> Option<JValue> {
        self.0.get(key.as_str()?).map(JsonView::root)
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.ids().into_iter().map(JValue::from).collect())
    }
}

/// A lazy view of part of a shared JSON value.
#[derive(Debug)]
struct JsonView {
    root: Arc<Value>,
    path: Vec<PathSeg>,
}

impl JsonView {
    fn root(root: Arc<Value>) -> JValue {
        Self::wrap(root, Vec::new())
    }

    fn wrap(root: Arc<Value>, path: Vec<PathSeg>) -> JValue {
        let view = JsonView { root, path };
        match view.get() {
            Value::Null => JValue::from(()),
            Value::Bool(b) => JValue::from(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    JValue::from(i)
                } else if let Some(u) = n.as_u64() {
                    JValue::from(u)
                } else {
                    JValue::from(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => JValue::from(s.as_str()),
            Value::Array(_) | Value::Object(_) => JValue::from_object(view),
        }
    }

    fn get(&self) -> &Value {
        let mut cur: &Value = &self.root;
        for seg in &self.path {
            cur = match (seg, cur) {
                (PathSeg::Key(k), Value::Object(m)) => m.get(k).unwrap_or(&Value::Null),
                (PathSeg::Index(i), Value::Array(a)) => a.get(*i).unwrap_or(&Value::Null),
                _ => &Value::Null,
            };
        }
        cur
    }

    fn child(&self, seg: PathSeg) -> JValue {
        let mut path = self.path.clone();
        path.push(seg);
        Self::wrap(self.root.clone(), path)
    }
}

impl Object for JsonView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        match self.get() {
            Value::Array(_) => ObjectRepr::Seq,
            _ => ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &JValue) -> Option<JValue> {
        match self.get() {
            Value::Object(m) => {
                let k = key.as_str()?;
                m.contains_key(k)
                    .then(|| self.child(PathSeg::Key(k.to_string())))
            }
            Value::Array(a) => {
                let i = i64::try_from(key.clone()).ok()?;
                let i = if i < 0 { a.len() as i64 + i } else { i };
                let i = usize::try_from(i).ok().filter(|&i| i < a.len())?;
                Some(self.child(PathSeg::Index(i)))
            }
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        match self.get() {
            Value::Object(m) => {
                Enumerator::Values(m.keys().map(|k| JValue::from(k.as_str())).collect())
            }
            Value::Array(a) => Enumerator::Seq(a.len()),
            _ => Enumerator::Empty,
        }
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        match self.get() {
            Value::Object(m) => Some(m.len()),
            Value::Array(a) => Some(a.len()),
            _ => Some(0),
        }
    }
}

/// Truthiness of a JSON value, as conditions see it.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(src: &str, input: Value) -> Result<Value, Error> {
        let c = compile_str(src, Missing::Null)?;
        c.eval(&Scope::with_input(input)).map(|v| (*v).clone())
    }

    #[test]
    fn lone_expression_keeps_json_type() {
        assert_eq!(
            eval("{{ input.total > 100 }}", json!({"total": 150})),
            Ok(json!(true))
        );
        assert_eq!(
            eval("{{ input.items }}", json!({"items": [1, 2]})),
            Ok(json!([1, 2]))
        );
        assert_eq!(
            eval("{{ input.items | length }}", json!({"items": [1, 2]})),
            Ok(json!(2))
        );
        assert_eq!(eval("{{ input.a + 1 }}", json!({"a": 41})), Ok(json!(42)));
        assert_eq!(
            eval("{{ {'x': input.a} }}", json!({"a": "b"})),
            Ok(json!({"x": "b"}))
        );
        assert_eq!(eval("{{ input.missing }}", json!({})), Ok(json!(null)));
        assert_eq!(
            eval("{{ input.missing.deeper }}", json!({})),
            Ok(json!(null))
        );
    }

    #[test]
    fn text_is_interpolated() {
        assert_eq!(
            eval("Hello {{ input.name }}!", json!({"name": "Ada"})),
            Ok(json!("Hello Ada!"))
        );
        assert_eq!(
            eval("{% for x in input %}{{ x }},{% endfor %}", json!([1, 2, 3])),
            Ok(json!("1,2,3,"))
        );
        assert_eq!(eval("plain", json!(null)), Ok(json!("plain")));
    }

    #[test]
    fn lone_input_is_shared_not_copied() {
        let input = Arc::new(json!({"big": "x"}));
        let scope = Scope {
            input: input.clone(),
            ..Scope::with_input(Value::Null)
        };
        let out = compile_str("{{ input }}", Missing::Null)
            .unwrap()
            .eval(&scope)
            .unwrap();
        assert!(Arc::ptr_eq(&input, &out));
    }

    #[test]
    fn loops_run_out_of_fuel() {
        let err = eval(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            json!(null),
        );
        assert_eq!(err, Err(Error::OutOfFuel));
    }

    #[test]
    fn exploding_output_is_stopped() {
        // minijinja charges fuel per byte produced, so size blow-ups run dry too.
        let err = eval(
            "{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}",
            json!(null),
        );
        assert!(
            matches!(err, Err(Error::OutOfFuel | Error::TooLarge)),
            "{err:?}"
        );
        let err = eval("{{ ['x' * 10000000, 'y' * 10000000] }}", json!(null));
        assert!(
            matches!(err, Err(Error::OutOfFuel | Error::TooLarge)),
            "{err:?}"
        );
    }

    /// Templates come from workflows (and peers): no nesting in the text,
    /// in macros or in the values they reach may overflow the stack. Each
    /// ends as an error (run on a thread with 1 MiB of stack, half a tokio
    /// worker's, so a stack overflow would show here).
    #[test]
    fn deep_templates_are_errors_not_crashes() {
        std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(|| {
                let constructs = |n: usize| {
                    [
                        format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n)),
                        format!("{{{{ {}1{} }}}}", "[".repeat(n), "]".repeat(n)),
                        format!("{{{{ {}true }}}}", "not ".repeat(n)),
                        format!("{{{{ {}1 }}}}", "- ".repeat(n)),
                        format!("{}x{}", "{% if true %}".repeat(n), "{% endif %}".repeat(n)),
                        format!("a {{{{ 1{} }}}} b", "|abs".repeat(n)),
                        format!("{{{{ 1{} }}}}", "+1".repeat(n)),
                        format!("{{{{ input{} }}}}", ".a".repeat(n)),
                        format!("{{{{ range{} }}}}", "(1)".repeat(n)),
                        format!("{{% set x = {}1 %}}{{{{ x }}}}", "not ".repeat(n)),
                    ]
                };
                // Far too deep: refused, naming the limit or the nesting.
                for src in constructs(100_000) {
                    let err = compile_str(&src, Missing::Null).unwrap_err();
                    assert!(
                        matches!(&err, Error::Syntax(m) if m.contains("too long") || m.contains("recursion")),
                        "{}: {err}",
                        &src[..30]
                    );
                }
                // As deep as the limit lets through: no crash, either way.
                let within = MAX_BLOCK_TOKENS - 3;
                for src in constructs(within) {
                    if let Ok(c) = compile_str(&src, Missing::Null) {
                        let _ = c.eval(&Scope::with_input(json!({"a": {"a": 1}})));
                    }
                }
                let macros = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
                let err = eval(macros, json!(null)).unwrap_err();
                assert!(err.to_string().contains("recursion"), "{err}");
                // A value nested as deep as JSON input allows is read (how
                // deep a step's output may be is the engine's check, see
                // `crate::value`).
                let mut deep = json!(1);
                for _ in 0..127 {
                    deep = json!([deep]);
                }
                assert_eq!(eval("{{ input | length }}", deep.clone()), Ok(json!(1)));
                assert!(eval("{{ [[[[[[[[[[input]]]]]]]]]] }}", deep).is_ok());
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(check("{{ input. }}"), Err(Error::Syntax(_))));
        assert!(matches!(check("{% if %}"), Err(Error::Syntax(_))));
    }

    #[test]
    fn compile_skips_raw_fields() {
        let c = compile(
            &json!({"jq": "{{ not a template }}", "x": "{{ input }}"}),
            &["jq"],
            Missing::Null,
        )
        .unwrap();
        let v = c.eval(&Scope::with_input(json!(1))).unwrap();
        assert_eq!(*v, json!({"jq": "{{ not a template }}", "x": 1}));
    }

    fn strict(src: &str, input: Value) -> Result<Value, Error> {
        let c = compile_str(src, Missing::Error)?;
        c.eval(&Scope::with_input(input)).map(|v| (*v).clone())
    }

    #[track_caller]
    fn missing(src: &str, input: Value, path: &str) {
        match strict(src, input.clone()) {
            Err(Error::Missing { template, path: p }) => {
                assert_eq!((template.as_str(), p.as_str()), (src, path));
            }
            other => panic!("{src} on {input}: {other:?}"),
        }
        // Not strict: null (or nothing), as before.
        assert!(eval(src, input).is_ok(), "{src}");
    }

    #[test]
    fn strict_mode_names_the_missing_path_and_the_template() {
        let order = json!({"body": {"total": 150, "note": null, "items": [{"id": 1}]}});
        missing("{{ input.body.totl }}", order.clone(), "input.body.totl");
        missing("{{ input.bdy.total }}", order.clone(), "input.bdy");
        missing(
            "{{ input.body.items[3].id }}",
            order.clone(),
            "input.body.items[3]",
        );
        missing("{{ nodes.nope.x }}", order.clone(), "nodes.nope");
        missing(
            "{{ input.body.totl > 100 }}",
            order.clone(),
            "input.body.totl",
        );
        missing(
            "total: {{ input.body.totl }}",
            order.clone(),
            "input.body.totl",
        );
        missing(
            "{{ input.body.totl | upper }}",
            order.clone(),
            "input.body.totl",
        );
        // Present (a null that is there is a value), and guarded reads.
        assert_eq!(
            strict("{{ input.body.total > 100 }}", order.clone()),
            Ok(json!(true))
        );
        assert_eq!(
            strict("{{ input.body.note }}", order.clone()),
            Ok(json!(null))
        );
        assert_eq!(
            strict("{{ input.body.items[0].id }}", order.clone()),
            Ok(json!(1))
        );
        assert_eq!(
            strict("{{ input.body.totl is defined }}", order.clone()),
            Ok(json!(false))
        );
        assert_eq!(
            strict("{{ input.body.totl | default(7) }}", order.clone()),
            Ok(json!(7))
        );
        let e = strict("{{ input.body.totl }}", order).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`input.body.totl` is missing, in `{{ input.body.totl }}` (strict mode: a missing field is an error, not null)"
        );
    }

    #[test]
    fn missing_paths_are_cut_where_they_stop() {
        let scope = Scope::with_input(json!({"a": {"b": 1}, "list": [1]}));
        assert_eq!(
            missing_paths(
                "{{ input.a.b + input.a.c.d }} {{ input.x }} {{ nodes.n.y }}",
                &scope
            ),
            vec!["input.a.c", "input.x", "nodes.n"]
        );
        assert!(missing_paths("{{ input.a.b }}", &scope).is_empty());
        assert_eq!(missing_paths("{{ inptu.a }}", &scope), vec!["inptu"]);
        assert!(
            missing_paths(
                "{% for i in range(2) %}{{ i }}{{ loop.index }}{% endfor %}",
                &scope
            )
            .is_empty()
        );
        assert!(missing_paths("not a template", &scope).is_empty());
    }
}
