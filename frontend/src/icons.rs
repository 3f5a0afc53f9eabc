//! The node kinds' icons: one SVG per kind in `assets/node-icons`, 24×24,
//! stroked paths only (`currentColor`, width 2, round caps and joins), so
//! they share one style and take the colour of the text around them. Pure:
//! the paths are read out here and drawn by the palette, the canvas and
//! the inspector.

/// `(kind, SVG text)` for every kind.
static ICONS: &[(&str, &str)] = &[
    (
        "ai.chat",
        include_str!("../../assets/node-icons/ai.chat.svg"),
    ),
    (
        "code.js",
        include_str!("../../assets/node-icons/code.js.svg"),
    ),
    (
        "code.wasm",
        include_str!("../../assets/node-icons/code.wasm.svg"),
    ),
    (
        "data.set",
        include_str!("../../assets/node-icons/data.set.svg"),
    ),
    (
        "data.transform",
        include_str!("../../assets/node-icons/data.transform.svg"),
    ),
    (
        "db.query",
        include_str!("../../assets/node-icons/db.query.svg"),
    ),
    (
        "email.send",
        include_str!("../../assets/node-icons/email.send.svg"),
    ),
    (
        "file.read",
        include_str!("../../assets/node-icons/file.read.svg"),
    ),
    (
        "file.write",
        include_str!("../../assets/node-icons/file.write.svg"),
    ),
    (
        "flow.approval",
        include_str!("../../assets/node-icons/flow.approval.svg"),
    ),
    (
        "flow.if",
        include_str!("../../assets/node-icons/flow.if.svg"),
    ),
    (
        "flow.join",
        include_str!("../../assets/node-icons/flow.join.svg"),
    ),
    (
        "flow.merge",
        include_str!("../../assets/node-icons/flow.merge.svg"),
    ),
    (
        "flow.split",
        include_str!("../../assets/node-icons/flow.split.svg"),
    ),
    (
        "flow.subworkflow",
        include_str!("../../assets/node-icons/flow.subworkflow.svg"),
    ),
    (
        "flow.switch",
        include_str!("../../assets/node-icons/flow.switch.svg"),
    ),
    (
        "flow.wait",
        include_str!("../../assets/node-icons/flow.wait.svg"),
    ),
    (
        "http.request",
        include_str!("../../assets/node-icons/http.request.svg"),
    ),
    (
        "output.end",
        include_str!("../../assets/node-icons/output.end.svg"),
    ),
    (
        "output.respond",
        include_str!("../../assets/node-icons/output.respond.svg"),
    ),
    (
        "trigger.error",
        include_str!("../../assets/node-icons/trigger.error.svg"),
    ),
    (
        "trigger.file",
        include_str!("../../assets/node-icons/trigger.file.svg"),
    ),
    (
        "trigger.manual",
        include_str!("../../assets/node-icons/trigger.manual.svg"),
    ),
    (
        "trigger.schedule",
        include_str!("../../assets/node-icons/trigger.schedule.svg"),
    ),
    (
        "trigger.webhook",
        include_str!("../../assets/node-icons/trigger.webhook.svg"),
    ),
    (
        "trigger.workflow",
        include_str!("../../assets/node-icons/trigger.workflow.svg"),
    ),
    (
        "util.log",
        include_str!("../../assets/node-icons/util.log.svg"),
    ),
];

/// The `d` of each path of `kind`'s icon (empty for an unknown kind).
pub fn paths(kind: &str) -> Vec<&'static str> {
    let Some((_, svg)) = ICONS.iter().find(|(k, _)| *k == kind) else {
        return Vec::new();
    };
    svg.split("<path d=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_an_icon_of_stroked_paths_in_one_style() {
        for k in sluice_model::catalog() {
            let svg = ICONS
                .iter()
                .find(|(kind, _)| *kind == k.kind)
                .map(|(_, s)| *s)
                .unwrap_or_else(|| panic!("{} has no icon in assets/node-icons", k.kind));
            assert!(
                svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 24 24\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"2\" stroke-linecap=\"round\" stroke-linejoin=\"round\">"),
                "{}: not in the icons' style",
                k.kind
            );
            let paths = paths(k.kind);
            assert!(!paths.is_empty(), "{}: no path", k.kind);
            // Nothing but paths inside.
            let elements = svg.matches('<').count();
            assert_eq!(
                elements,
                paths.len() + 2,
                "{}: only <path d> elements",
                k.kind
            );
            for d in paths {
                assert!(d.starts_with('M'), "{}: a path starts with a move", k.kind);
                assert!(
                    d.chars()
                        .all(|c| c.is_ascii_alphanumeric() || " .-,".contains(c)),
                    "{}: {d}",
                    k.kind
                );
            }
        }
        assert_eq!(
            ICONS.len(),
            sluice_model::catalog().len(),
            "an icon for no kind"
        );
        assert!(paths("no.such").is_empty());
    }
}
