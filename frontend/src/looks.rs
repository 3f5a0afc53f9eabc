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

/// `kind`'s icon inside an SVG drawing, `size` units square at (`x`, `y`).
pub fn icon_at(kind: &str, x: f64, y: f64, size: f64) -> Html {
    html! {
        <svg class="icon" x={x.to_string()} y={y.to_string()} width={size.to_string()} height={size.to_string()}
            viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2"
            stroke-linecap="round" stroke-linejoin="round" aria-hidden="true">
            { for crate::icons::paths(kind).into_iter().map(|d| html! { <path d={d} /> }) }
        </svg>
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
