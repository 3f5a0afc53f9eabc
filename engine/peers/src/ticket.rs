//! Share tickets: one line of text, `sluice` followed by base32 of a
//! postcard [`Ticket`], optionally inside a `sluice://join/<ticket>` link.
//! A ticket is a capability (it holds the share's secret) and reveals the
//! sharer's addresses: hand it over like a password.

use iroh::EndpointAddr;
use serde::{Deserialize, Serialize};

/// What a ticket holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// The sharer: its peer id and the addresses it could be reached at
    /// (hints).
    pub addr: EndpointAddr,
    /// The sharer's name, to ask "join NAME's workflow?".
    pub name: String,
    pub workflow: String,
    pub share: String,
    pub secret: [u8; 32],
    pub role: String,
}

const PREFIX: &str = "sluice";
const LINK: &str = "sluice://join/";
/// The longest ticket text read (a ticket is a few hundred bytes).
const MAX_TICKET: usize = 8 << 10;

/// Why a ticket could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("not a Sluice ticket (it should start with `sluice` or `{LINK}`)")]
    NotATicket,
    #[error("the ticket is damaged: {0}")]
    Damaged(String),
    #[error("the ticket is too long")]
    TooLong,
}

impl Ticket {
    /// The ticket as one line of text.
    pub fn encode(&self) -> String {
        let bytes = postcard::to_stdvec(self).unwrap_or_default();
        let mut out = PREFIX.to_string();
        out.push_str(
            &data_encoding::BASE32_NOPAD
                .encode(&bytes)
                .to_ascii_lowercase(),
        );
        out
    }

    /// The ticket as a `sluice://join/` link.
    pub fn link(&self) -> String {
        format!("{LINK}{}", self.encode())
    }

    /// Reads a ticket or a link (surrounding whitespace is ignored).
    pub fn decode(text: &str) -> Result<Ticket, TicketError> {
        let text = text.trim();
        if text.len() > MAX_TICKET {
            return Err(TicketError::TooLong);
        }
        let text = text.strip_prefix(LINK).unwrap_or(text);
        let body = text.strip_prefix(PREFIX).ok_or(TicketError::NotATicket)?;
        let bytes = data_encoding::BASE32_NOPAD
            .decode(body.to_ascii_uppercase().as_bytes())
            .map_err(|e| TicketError::Damaged(e.to_string()))?;
        let t: Ticket =
            postcard::from_bytes(&bytes).map_err(|e| TicketError::Damaged(e.to_string()))?;
        if sluice_api::Role::parse(&t.role).is_none() {
            return Err(TicketError::Damaged(format!("unknown role `{}`", t.role)));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_round_trip_as_text_and_links_and_bad_ones_are_named() {
        let key = iroh::SecretKey::from_bytes(&[7; 32]);
        let t = Ticket {
            addr: EndpointAddr::new(key.public()).with_ip_addr("127.0.0.1:4000".parse().unwrap()),
            name: "Ada".into(),
            workflow: "orders".into(),
            share: "s1".into(),
            secret: [9; 32],
            role: "editor".into(),
        };
        let text = t.encode();
        assert!(text.starts_with("sluice"));
        assert!(!text.contains(char::is_whitespace));
        assert_eq!(Ticket::decode(&text).unwrap(), t);
        assert_eq!(Ticket::decode(&format!("  {}\n", t.link())).unwrap(), t);
        assert_eq!(Ticket::decode("hello"), Err(TicketError::NotATicket));
        assert!(matches!(
            Ticket::decode("sluice!!!"),
            Err(TicketError::Damaged(_))
        ));
        assert!(matches!(
            Ticket::decode(&text[..text.len() - 10]),
            Err(TicketError::Damaged(_))
        ));
    }
}
