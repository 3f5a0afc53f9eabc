//! A `code.wasm` node: takes `{"items": [{"sku", "price", "qty"}], "currency"?}`
//! and returns `{"total", "count", "currency"}`; logs what it did.
//!
//! The world it implements is `engine/sandbox/wit/node.wit` (`sluice:node`):
//! `run(input: string) -> result<string, string>`, JSON text in and out, and
//! a `log(level, message)` import.

use serde::{Deserialize, Serialize};

wit_bindgen::generate!({
    path: "../../../engine/sandbox/wit",
    world: "node",
});

#[derive(Deserialize)]
struct Order {
    items: Vec<Item>,
    #[serde(default)]
    currency: Option<String>,
}

#[derive(Deserialize)]
struct Item {
    sku: String,
    price: f64,
    #[serde(default = "one")]
    qty: u32,
}

fn one() -> u32 {
    1
}

#[derive(Serialize)]
struct Total {
    total: f64,
    count: u32,
    currency: String,
}

struct OrderTotal;

impl Guest for OrderTotal {
    fn run(input: String) -> Result<String, String> {
        // A bad message fails the step with a clear error (and can be routed
        // to the node's `error` port).
        let order: Order =
            serde_json::from_str(&input).map_err(|e| format!("not an order: {e}"))?;
        let mut total = 0.0;
        let mut count = 0;
        for item in &order.items {
            if item.price < 0.0 {
                return Err(format!("item {} has a negative price", item.sku));
            }
            total += item.price * f64::from(item.qty);
            count += item.qty;
        }
        let total = (total * 100.0).round() / 100.0;
        log("info", &format!("{count} item(s), total {total}"));
        let out = Total {
            total,
            count,
            currency: order.currency.unwrap_or_else(|| "EUR".into()),
        };
        serde_json::to_string(&out).map_err(|e| e.to_string())
    }
}

export!(OrderTotal);
