//! Drawing what `icons` and `text` read out: a kind's icon as inline SVG
//! and inline Markdown as HTML.

use yew::prelude::*;

use crate::text::{Span, spans};

/// `kind`'s icon, sized by CSS (`.icon`), coloured like the text around it.
pub fn icon(kind: &str) -> Html {
    html! {
        <svg class="icon" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2"
            stroke-linecap="round" stroke-linejoin="round" aria-hidden="true" focusable="false">
            { for crate::icons::paths(kind).into_iter().map(|d| html! { <path d={d} /> }) }
        </svg>
    }
}

/// Every kind's icon as an SVG `<symbol>` (`#icon-<kind>`), for the
/// canvas's `<defs>`: each node then draws one `<use>`, not its own copy
/// of the paths (a thousand nodes stay a small DOM).
pub fn icon_symbols() -> Html {
    html! {
        { for sluice_model::catalog().iter().map(|k| html! {
            <symbol id={format!("icon-{}", k.kind)} viewBox="0 0 24 24" fill="none" stroke="currentColor"
                stroke-width="2" stroke-linecap="round" stroke-linejoin="round">
                { for crate::icons::paths(k.kind).into_iter().map(|d| html! { <path d={d} /> }) }
            </symbol>
        }) }
    }
}

/// `kind`'s icon inside the canvas (see [`icon_symbols`]), `size` units
/// square at (`x`, `y`).
pub fn icon_at(kind: &str, x: f64, y: f64, size: f64) -> Html {
    html! {
        <use class="icon" href={format!("#icon-{kind}")} x={x.to_string()} y={y.to_string()}
            width={size.to_string()} height={size.to_string()} aria-hidden="true" />
    }
}

/// One line of inline Markdown (code, bold, emphasis, http(s) links).
pub fn rich(md: &str) -> Html {
    html! {
        { for spans(md).into_iter().map(|s| match s {
            Span::Text(t) => html! { { t } },
            Span::Code(c) => html! { <code>{ c }</code> },
            Span::Strong(t) => html! { <strong>{ t }</strong> },
            Span::Em(t) => html! { <em>{ t }</em> },
            Span::Link { text, href } => html! {
                <a href={href} target="_blank" rel="noopener noreferrer">{ text }</a>
            },
        }) }
    }
}

/// Puts `text` on the clipboard, when the page may (a secure context:
/// loopback or https); elsewhere `navigator.clipboard` does not exist, and
/// calling it would throw. Whether it was asked.
pub fn copy_text(text: &str) -> bool {
    let Some(w) = web_sys::window() else {
        return false;
    };
    let navigator = w.navigator();
    let has = js_sys::Reflect::get(&navigator, &"clipboard".into())
        .is_ok_and(|c| !c.is_undefined() && !c.is_null());
    if has {
        // The promise's failure (no permission) leaves the text shown.
        drop(navigator.clipboard().write_text(text));
    }
    has
}
