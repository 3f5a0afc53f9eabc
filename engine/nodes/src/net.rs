//! Where `http.request` may connect: the SSRF policy.
//!
//! A request's URL often comes from a template fed by a webhook caller or a
//! peer, who are not trusted (DESIGN.md §8): they must not make the engine
//! call its own trigger port (its API answers loopback callers) or a
//! cloud metadata service, nor reach this machine through a DNS name that
//! points at it (DNS rebinding). By default `http.request` refuses:
//!
//! - the engine's own trigger port, on a loopback or unspecified address
//!   or the address it listens on;
//! - link-local addresses (169.254.0.0/16, fe80::/10; the metadata services
//!   of most clouds live there) and the other metadata addresses
//!   (fd00:ec2::254, 100.100.100.200);
//! - a DNS name that resolves to a loopback or unspecified address. Loopback
//!   written as an address (`127.0.0.1`, `[::1]`) or as `localhost` is
//!   allowed: that is the user meaning this machine, not a name that
//!   changed under them.
//!
//! `[http] deny` adds addresses (CIDRs) and host names to refuse, `[http]
//! allow` lists addresses and names that are allowed whatever else says.
//!
//! URLs are checked at every hop (the first request and each redirect),
//! and names in the client's resolver, against every address they resolve
//! to: the address checked is the address connected to, so a name cannot
//! resolve to a public address when checked and to 127.0.0.1 when used.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Addresses refused by default, and why (said in the error).
const BUILT_IN: &[(&str, &str)] = &[
    (
        "169.254.0.0/16",
        "a link-local address (where cloud metadata services answer)",
    ),
    ("fe80::/10", "a link-local address"),
    ("fd00:ec2::254/128", "a cloud metadata address"),
    ("100.100.100.200/32", "a cloud metadata address"),
];

/// A bad `[http] allow` or `deny` entry.
#[derive(Debug, thiserror::Error)]
#[error(
    "[http] {list}: `{entry}` is neither an address or CIDR (`10.0.0.0/8`) nor a host name (`api.example.com`, `*.example.com`)"
)]
pub struct RuleError {
    pub list: &'static str,
    pub entry: String,
}

/// Why a destination is refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    #[error(
        "{addr} is this engine's own trigger port: http.request may not call it (its API trusts loopback callers); config.toml [http] allow lifts this"
    )]
    OwnPort { addr: SocketAddr },
    #[error("{what} is {why}: http.request may not call it; config.toml [http] allow lifts this")]
    Denied { what: String, why: String },
    #[error(
        "`{name}` resolves to {addr}, an address of this machine: a name that points here is refused (DNS rebinding); call the address or `localhost` directly, or add the name to config.toml [http] allow"
    )]
    NameToLoopback { name: String, addr: IpAddr },
    #[error("`{name}` could not be resolved: {reason}")]
    NotResolved { name: String, reason: String },
}

#[derive(Debug, Clone)]
enum Rule {
    Net(IpNet),
    /// Lower-case; `*.example.com` matches the subdomains of example.com.
    Host(String),
}

impl Rule {
    fn parse(list: &'static str, entry: &str) -> Result<Rule, RuleError> {
        let bad = || RuleError {
            list,
            entry: entry.to_string(),
        };
        let e = entry.trim();
        if let Ok(net) = e.parse::<IpNet>() {
            return Ok(Rule::Net(net.trunc()));
        }
        if let Ok(ip) = e
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return Ok(Rule::Net(IpNet::from(ip)));
        }
        let host = e.to_ascii_lowercase();
        let name = host.strip_prefix("*.").unwrap_or(&host);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(bad());
        }
        Ok(Rule::Host(host))
    }

    fn matches_ip(&self, ip: IpAddr) -> bool {
        matches!(self, Rule::Net(n) if n.contains(&ip))
    }

    fn matches_host(&self, host: &str) -> bool {
        match self {
            Rule::Host(h) => match h.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
                None => h == host,
            },
            Rule::Net(_) => false,
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::Net(n) => n.fmt(f),
            Rule::Host(h) => h.fmt(f),
        }
    }
}

/// The policy: built from `[http] allow` and `deny`, plus the engine's own
/// trigger address once it listens ([`OwnAddresses`]).
#[derive(Debug, Clone)]
pub struct NetPolicy {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    allow: Vec<Rule>,
    /// The built-in denials with their reasons, then `[http] deny`.
    deny: Vec<(Rule, String)>,
    own: OwnAddresses,
    /// Fixed answers for names, looked up before the system's resolver
    /// (tests: a name that resolves to 127.0.0.1 without touching DNS).
    hosts: Vec<(String, Vec<IpAddr>)>,
}

/// The addresses the engine's trigger port listens on, set once it is
/// bound; shared between the engine and its HTTP client's policy.
#[derive(Debug, Clone, Default)]
pub struct OwnAddresses(Arc<RwLock<Vec<SocketAddr>>>);

impl OwnAddresses {
    pub fn set(&self, addrs: Vec<SocketAddr>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = addrs;
    }

    pub fn get(&self) -> Vec<SocketAddr> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl NetPolicy {
    /// The policy of `[http] allow` and `deny`; an entry that is neither an
    /// address, a CIDR nor a host name is an error naming it.
    pub fn new(
        allow: &[String],
        deny: &[String],
        own: OwnAddresses,
    ) -> Result<NetPolicy, RuleError> {
        let allow = allow
            .iter()
            .map(|e| Rule::parse("allow", e))
            .collect::<Result<Vec<_>, _>>()?;
        let mut rules = Vec::new();
        for (net, why) in BUILT_IN {
            let rule = Rule::parse("deny", net)?;
            rules.push((rule, (*why).to_string()));
        }
        for e in deny {
            let rule = Rule::parse("deny", e)?;
            let why = format!("denied by config.toml [http] deny (`{rule}`)");
            rules.push((rule, why));
        }
        Ok(NetPolicy {
            inner: Arc::new(Inner {
                allow,
                deny: rules,
                own,
                hosts: Vec::new(),
            }),
        })
    }

    /// Answers `name` with `addrs` instead of asking DNS (tests).
    #[doc(hidden)]
    pub fn with_fixed_host(mut self, name: &str, addrs: Vec<IpAddr>) -> NetPolicy {
        Arc::make_mut(&mut self.inner)
            .hosts
            .push((name.to_ascii_lowercase(), addrs));
        self
    }

    /// Whether `url` may be requested as far as its host and port say:
    /// an address is checked here, a name's addresses when it is resolved.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let port = url.port_or_known_default().unwrap_or(0);
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        // The URL parser has already turned every spelling of an address
        // (`0x7f.1`, `2130706433`) into its canonical form.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.check_addr(ip, port, None),
            Err(_) => {
                let d = host.trim_end_matches('.').to_ascii_lowercase();
                if is_localhost(&d) {
                    for ip in LOOPBACK {
                        self.check_addr(ip, port, Some(&d))?;
                    }
                    return Ok(());
                }
                if self.allowed(None, Some(&d)) {
                    return Ok(());
                }
                match self.inner.deny.iter().find(|(r, _)| r.matches_host(&d)) {
                    Some((_, why)) => Err(Refused::Denied {
                        what: format!("`{d}`"),
                        why: why.clone(),
                    }),
                    None => Ok(()),
                }
            }
        }
    }

    fn allowed(&self, ip: Option<IpAddr>, host: Option<&str>) -> bool {
        self.inner.allow.iter().any(|r| {
            ip.is_some_and(|ip| r.matches_ip(ip)) || host.is_some_and(|h| r.matches_host(h))
        })
    }

    /// An address to connect to on `port` (`name`: the URL's host name,
    /// for `localhost`).
    fn check_addr(&self, ip: IpAddr, port: u16, name: Option<&str>) -> Result<(), Refused> {
        let ip = canonical(ip);
        if self.allowed(Some(ip), name) {
            return Ok(());
        }
        if let Some((_, why)) = self.inner.deny.iter().find(|(r, _)| r.matches_ip(ip)) {
            return Err(Refused::Denied {
                what: ip.to_string(),
                why: why.clone(),
            });
        }
        let own = self.inner.own.get();
        if own.iter().any(|o| {
            o.port() == port && (ip.is_loopback() || ip.is_unspecified() || canonical(o.ip()) == ip)
        }) {
            return Err(Refused::OwnPort {
                addr: SocketAddr::new(ip, port),
            });
        }
        Ok(())
    }

    /// Resolves `name` and keeps the addresses the policy allows (port 0:
    /// the connector sets the URL's); none left is an error saying why.
    pub async fn resolve(&self, name: &str) -> Result<Vec<SocketAddr>, Refused> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let found: Vec<IpAddr> = if is_localhost(&name) {
            LOOPBACK.to_vec()
        } else if let Some((_, addrs)) = self.inner.hosts.iter().find(|(h, _)| *h == name) {
            addrs.clone()
        } else {
            tokio::net::lookup_host((name.as_str(), 0))
                .await
                .map_err(|e| Refused::NotResolved {
                    name: name.clone(),
                    reason: e.to_string(),
                })?
                .map(|a| a.ip())
                .collect()
        };
        let mut kept = Vec::new();
        let mut first_refusal = None;
        for ip in found {
            match self.check_resolved(&name, canonical(ip)) {
                Ok(()) => kept.push(SocketAddr::new(ip, 0)),
                Err(r) => {
                    first_refusal.get_or_insert(r);
                }
            }
        }
        match (kept.is_empty(), first_refusal) {
            (false, _) => Ok(kept),
            (true, Some(r)) => Err(r),
            (true, None) => Err(Refused::NotResolved {
                name,
                reason: "no address".into(),
            }),
        }
    }

    /// An address `name` resolved to: allowed, denied, or this machine
    /// behind a name (the own port of `localhost` is checked by the URL).
    fn check_resolved(&self, name: &str, ip: IpAddr) -> Result<(), Refused> {
        if self.allowed(Some(ip), Some(name)) {
            return Ok(());
        }
        if let Some((_, why)) = self.inner.deny.iter().find(|(r, _)| r.matches_ip(ip)) {
            return Err(Refused::Denied {
                what: format!("`{name}` ({ip})"),
                why: why.clone(),
            });
        }
        if !is_localhost(name) && (ip.is_loopback() || ip.is_unspecified()) {
            return Err(Refused::NameToLoopback {
                name: name.to_string(),
                addr: ip,
            });
        }
        Ok(())
    }

    /// The resolver the shared client uses: every name through [`resolve`].
    pub(crate) fn resolver(&self) -> Arc<PolicyResolver> {
        Arc::new(PolicyResolver(self.clone()))
    }
}

const LOOPBACK: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// `localhost` and its subdomains are this machine by definition (RFC
/// 6761): answered without DNS, like an address.
fn is_localhost(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

/// An IPv4 address written as IPv6 (`::ffff:169.254.169.254`) is checked
/// as the IPv4 address it reaches.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// reqwest's resolver hook over [`NetPolicy::resolve`].
pub(crate) struct PolicyResolver(NetPolicy);

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            match policy.resolve(&name).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(refused) => Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>),
            }
        })
    }
}

/// The refusal somewhere in a request error's sources, if that is what
/// failed it.
pub(crate) fn refusal_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Refused>() {
            return Some(r);
        }
        source = s.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> NetPolicy {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        NetPolicy::new(&s(allow), &s(deny), OwnAddresses::default()).unwrap()
    }

    fn url(u: &str) -> Url {
        Url::parse(u).unwrap()
    }

    #[test]
    fn metadata_and_link_local_are_refused_by_default() {
        let p = policy(&[], &[]);
        for u in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "http://[::ffff:169.254.169.254]/",
            "http://100.100.100.200/",
            // Other spellings of 169.254.169.254 the URL parser reads.
            "http://2852039166/",
            "http://0xa9fea9fe/",
            "http://169.254.43518/",
        ] {
            let e = p.check_url(&url(u)).unwrap_err();
            assert!(matches!(e, Refused::Denied { .. }), "{u}: {e}");
        }
        for u in [
            "http://127.0.0.1:8080/",
            "http://localhost:3000/",
            "http://[::1]/",
            "http://10.0.0.5/",
            "https://example.com/",
        ] {
            p.check_url(&url(u)).unwrap();
        }
    }

    #[test]
    fn the_own_port_is_refused_on_every_local_spelling() {
        let own = OwnAddresses::default();
        let p = NetPolicy::new(&[], &[], own.clone()).unwrap();
        p.check_url(&url("http://127.0.0.1:4260/api/v1/workflows"))
            .unwrap();
        own.set(vec!["127.0.0.1:4260".parse().unwrap()]);
        for u in [
            "http://127.0.0.1:4260/api/v1/workflows",
            "http://127.1.2.3:4260/",
            "http://localhost:4260/",
            "http://[::1]:4260/",
            "http://0.0.0.0:4260/",
            "http://[::ffff:127.0.0.1]:4260/",
        ] {
            let e = p.check_url(&url(u)).unwrap_err();
            assert!(matches!(e, Refused::OwnPort { .. }), "{u}: {e}");
            assert!(e.to_string().contains("own trigger port"), "{e}");
        }
        p.check_url(&url("http://127.0.0.1:4261/")).unwrap();
    }

    #[tokio::test]
    async fn a_name_that_resolves_here_is_refused_unless_allowed() {
        let p = policy(&[], &[]).with_fixed_host("rebind.test", vec!["127.0.0.1".parse().unwrap()]);
        let e = p.resolve("rebind.test").await.unwrap_err();
        assert!(matches!(e, Refused::NameToLoopback { .. }), "{e}");
        assert!(e.to_string().contains("rebind.test"), "{e}");
        assert_eq!(p.resolve("localhost").await.unwrap().len(), 2);

        let allowed = policy(&["rebind.test"], &[])
            .with_fixed_host("rebind.test", vec!["127.0.0.1".parse().unwrap()]);
        assert_eq!(
            allowed.resolve("rebind.test").await.unwrap(),
            vec!["127.0.0.1:0".parse().unwrap()]
        );
    }

    #[tokio::test]
    async fn denied_addresses_are_dropped_from_a_names_answers() {
        let p = policy(&[], &["10.0.0.0/8"]).with_fixed_host(
            "mixed.test",
            vec!["10.1.2.3".parse().unwrap(), "192.0.2.7".parse().unwrap()],
        );
        assert_eq!(
            p.resolve("mixed.test").await.unwrap(),
            vec!["192.0.2.7:0".parse().unwrap()]
        );
        let only = policy(&[], &["10.0.0.0/8"])
            .with_fixed_host("inside.test", vec!["10.1.2.3".parse().unwrap()]);
        let e = only.resolve("inside.test").await.unwrap_err();
        assert!(e.to_string().contains("[http] deny (`10.0.0.0/8`)"), "{e}");
    }

    #[test]
    fn allow_and_deny_take_names_and_cidrs() {
        let p = policy(&["169.254.169.254"], &["*.internal.example", "intranet"]);
        p.check_url(&url("http://169.254.169.254/")).unwrap();
        p.check_url(&url("http://169.254.0.1/")).unwrap_err();
        p.check_url(&url("http://db.internal.example/"))
            .unwrap_err();
        p.check_url(&url("http://internal.example/")).unwrap();
        p.check_url(&url("http://INTRANET./x")).unwrap_err();
        let bad =
            NetPolicy::new(&["not a host!".into()], &[], OwnAddresses::default()).unwrap_err();
        assert!(
            bad.to_string().contains("[http] allow: `not a host!`"),
            "{bad}"
        );
    }
}
