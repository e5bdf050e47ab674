//! The runtime's house rule, checked on its own source: its rooms (a folder or a file directly
//! under `src/`) stand in layers, and a room imports only rooms of the layers below its own.
//! ARCHITECTURE.md prints the same list ([`LAYERS`], checked here too). The crate root
//! (`lib.rs`, the public façade) and the test-only rooms stand outside the layers; internal code
//! names the module that defines an item, never the root's re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, top first; a room imports only rooms of later layers.
const LAYERS: &[&[&str]] = &[
    &["runtime"],
    &["worker"],
    &["client"],
    &["listener"],
    &["logs", "otel_export"],
    &["connection"],
    &["retry", "placement", "otel"],
    &["transport", "error"],
    &["protocol"],
    &["config"],
];

/// Rooms outside the layers: the root and what only tests build.
const OUTSIDE: &[&str] = &[
    "lib",
    "house",
    "properties",
    "fuzz_regressions",
    "test_hooks",
];

/// Each room's source files, their text without comments and test modules.
fn rooms() -> BTreeMap<String, Vec<String>> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap_or(&f);
        let room = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let body = text.split("#[cfg(test)]\nmod ").next().unwrap_or(&text);
        let code: Vec<&str> = body
            .lines()
            .map(|l| l.find("//").map_or(l, |i| &l[..i]))
            .collect();
        out.entry(room).or_default().push(code.join("\n"));
    }
    out
}

/// The top-level items of a `{...}` group that `text` starts inside of (after its `{`): split at
/// the commas outside nested groups, up to the group's own `}`.
fn group_items(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 0usize, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

/// The rooms a file's code names after `crate::` (also inside `use crate::{a, b::{c, d}}`
/// groups). A name that is no room is one of the root's re-exports, and counts as `lib`.
fn named_rooms(code: &str, rooms: &BTreeSet<&str>) -> BTreeSet<String> {
    let word = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let names: Vec<String> = match rest.strip_prefix('{') {
            Some(group) => group_items(group).into_iter().map(word).collect(),
            None => vec![word(rest)],
        };
        for n in names.into_iter().filter(|n| !n.is_empty()) {
            out.insert(if rooms.contains(n.as_str()) {
                n
            } else {
                "lib".to_string()
            });
        }
    }
    out
}

/// Every import that does not look down: `from -> to` with `to` not in a lower layer.
fn upward(rooms: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let layer = |room: &str| LAYERS.iter().position(|l| l.contains(&room));
    let names: BTreeSet<&str> = rooms.keys().map(String::as_str).collect();
    let mut found = Vec::new();
    for (room, files) in rooms {
        let Some(from) = layer(room) else {
            continue;
        };
        for to in files.iter().flat_map(|c| named_rooms(c, &names)) {
            if to != *room && layer(&to).is_none_or(|t| t <= from) {
                found.push(format!("{room} -> {to}"));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_room_is_in_a_layer_and_imports_only_the_layers_below_it() {
    let rooms = rooms();
    let unplaced: Vec<&String> = rooms
        .keys()
        .filter(|r| {
            !OUTSIDE.contains(&r.as_str()) && !LAYERS.iter().any(|l| l.contains(&r.as_str()))
        })
        .collect();
    assert!(
        unplaced.is_empty(),
        "rooms in no layer: {unplaced:?}: add each to LAYERS (src/house.rs) and ARCHITECTURE.md"
    );
    let found = upward(&rooms);
    assert!(
        found.is_empty(),
        "imports that do not look down: {found:?}. Name the defining module (not the root's \
         re-exports), or move what the lower room needs below both"
    );
}

#[test]
fn the_check_sees_an_import_that_looks_up() {
    let mut rooms = rooms();
    assert!(rooms.len() > 10, "the rooms were read: {}", rooms.len());
    rooms
        .entry("config".into())
        .or_default()
        .push("use crate::runtime::Inner;".into());
    assert_eq!(upward(&rooms), ["config -> runtime"]);
    rooms
        .entry("transport".into())
        .or_default()
        .push("use crate::{protocol::{self, v1}, worker::{TaskDef}, Error};".into());
    assert_eq!(
        upward(&rooms),
        [
            "config -> runtime",
            "transport -> lib",
            "transport -> worker"
        ],
        "a nested group is read whole, and a root re-export counts as the root"
    );
}

#[test]
fn groups_split_at_their_own_commas() {
    assert_eq!(
        group_items("a::{b, c}, d} rest, e"),
        ["a::{b, c}", " d"],
        "the nested group stays one item, and the group ends at its own brace"
    );
}

#[test]
fn architecture_md_prints_the_layers() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .unwrap_or_default();
    let printed: String = LAYERS
        .iter()
        .map(|l| format!("{}\n", l.join("  ")))
        .collect();
    assert!(
        doc.contains(&format!("```text\n{printed}```")),
        "ARCHITECTURE.md's layer block is not:\n{printed}"
    );
}
