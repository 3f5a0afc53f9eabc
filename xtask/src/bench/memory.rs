//! The memory of a process tree, read from `/proc`: RSS and PSS in KiB.

use anyhow::{Context, Result};

/// A process's proportional set size: its share of every page it maps.
fn pss_kb(pid: u32) -> Result<u64> {
    proc_kb(pid, "smaps_rollup", "Pss:")
}

/// `measure` summed over a process and every process below it (the
/// webview's).
fn tree_kb(root: u32, measure: fn(u32) -> Result<u64>) -> Result<u64> {
    let mut parent_of = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The field after the ")" that ends the command name: state, ppid.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok())
            {
                parent_of.insert(pid, ppid);
            }
        }
    }
    let in_tree = |mut pid: u32| {
        while pid > 1 {
            if pid == root {
                return true;
            }
            pid = parent_of.get(&pid).copied().unwrap_or(0);
        }
        false
    };
    Ok(parent_of
        .keys()
        .filter(|&&p| in_tree(p))
        .filter_map(|&p| measure(p).ok())
        .sum())
}

pub(super) fn rss_kb(pid: u32) -> Result<u64> {
    proc_kb(pid, "status", "VmRSS:")
}

/// The KiB figure on the line starting with `key` in `/proc/<pid>/<file>`.
fn proc_kb(pid: u32, file: &str, key: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}"))?;
    let line = text
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("no {key} in /proc/{pid}/{file}"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("no value after {key}"))?
        .parse()?)
}

/// (RSS, PSS) in KiB of a process and every process below it.
pub(super) fn tree_memory(root: u32) -> Result<(u64, u64)> {
    Ok((tree_kb(root, rss_kb)?, tree_kb(root, pss_kb)?))
}
