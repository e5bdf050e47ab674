//! The engine's house rules, checked on its own source. First: no engine file imports another
//! in a circle. Second: the layers only look down: a room (its records and their invariants, in
//! `store/`, `sched/`, `dag/`, `time/`, `traces/`) never imports the hub; the actions that
//! cross rooms (`impl State` blocks) stand together in `hub/actions/`, above the rooms, save the
//! two named in [`ACTIONS_IN_ROOMS`]. A `mod x;` declaration is not an import, and neither is a
//! test module. Third: the transports (`api/`) never reach into the state; they read through
//! [`crate::hub::queries::View`] and change through the engine's entry points (`hub/`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every engine file as a module path (`sched::queue`; the crate root is `""`) and its text.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap_or(&p).with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
                    parts.pop();
                }
                if parts.first().is_some_and(|f| f == "bin") {
                    continue; // the binary is another crate
                }
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                out.insert(parts.join("::"), text);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

/// The text of a file before its test module, without comments.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `a::b::c` paths a file names after `crate::`, expanding `use crate::{a, b::c}` groups,
/// and after `super::` (resolved against `module`).
fn named_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item: String = item.trim().chars().take_while(|c| ident(*c)).collect();
                if !item.is_empty() {
                    out.push(item.split("::").map(str::to_string).collect());
                }
            }
            continue;
        }
        let path: String = rest.chars().take_while(|c| ident(*c)).collect();
        out.push(path.split("::").map(str::to_string).collect());
    }
    // `super::` from module `a::b` is `a`, whether `a::b` is a file or a folder's `mod.rs`.
    let mut here: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    here.pop();
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        rest = &rest[i + "super::".len()..];
        let path: String = rest.chars().take_while(|c| ident(*c)).collect();
        let mut full = here.clone();
        full.extend(
            path.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        out.push(full);
    }
    out
}

/// Which engine files each file imports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let modules: BTreeSet<&String> = files.keys().collect();
    let mut edges = BTreeMap::new();
    for (module, text) in &files {
        let mut to = BTreeSet::new();
        for path in named_paths(module, &code(text)) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|m| modules.contains(m));
            if let Some(t) = target.filter(|t| t != module && !t.is_empty()) {
                to.insert(t);
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

/// A circle of imports, if there is one (depth-first search).
fn a_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_engine_file_imports_another_in_a_circle() {
    let edges = imports();
    assert!(
        edges.len() > 30,
        "the engine's files were read: {}",
        edges.len()
    );
    // The checker sees an import where there is one: the hub names the queue room.
    assert!(edges["hub"].contains("sched::queue"));
    if let Some(circle) = a_circle(&edges) {
        panic!(
            "these engine files import each other in a circle: {}. Move what the lower one \
             needs below both (a room's records, `limits.rs`, `parse.rs`, `answers.rs`), or the higher one's actions out \
             of the room (see `house.rs`)",
            circle.join(" -> ")
        );
    }
}

#[test]
fn the_circle_check_finds_a_circle_when_there_is_one() {
    let mut edges = imports();
    edges
        .entry("sched::queue".to_string())
        .or_default()
        .insert("hub".to_string());
    let circle = a_circle(&edges).expect("a circle");
    assert!(circle.contains(&"hub".to_string()) && circle.contains(&"sched::queue".to_string()));
}

/// Where a transport file (`api/`) names the engine's state: its `State` type or an
/// `Engine`'s `state` field.
fn state_uses_in_transports(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    for (module, text) in files {
        if !(module == "api" || module.starts_with("api::")) {
            continue;
        }
        let code = code(text);
        for path in named_paths(module, &code) {
            if path.first().is_some_and(|p| p == "hub") && path.iter().any(|p| p == "State") {
                found.push(format!("{module} names crate::hub::State"));
            }
        }
        let mut rest = code.as_str();
        while let Some(i) = rest.find(".state") {
            let after = rest[i + ".state".len()..].chars().next();
            if !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                found.push(format!("{module} reads an engine's `state` field"));
            }
            rest = &rest[i + ".state".len()..];
        }
    }
    found
}

#[test]
fn transports_read_through_views_and_change_through_the_engine_s_entry_points() {
    let mut files = sources();
    let found = state_uses_in_transports(&files);
    assert!(
        found.is_empty(),
        "a transport reaches into the engine's state: {found:?}. Read through `Engine::view` \
         (hub/queries.rs) and change through an entry point (hub/)"
    );
    // The check sees both kinds of reach.
    files.insert(
        "api::probe".into(),
        "use crate::hub::State;\nfn f(e: &Engine) { e.state.lock(); }\n".into(),
    );
    assert_eq!(state_uses_in_transports(&files).len(), 2);
}

/// The actions that still stand in their room's folder, each for a reason: the durable log's
/// operations work on the durable room's private nodes; the status pipeline drives the run
/// fields only `store/` may change (a run's readable status, its published end).
const ACTIONS_IN_ROOMS: [&str; 2] = ["durable::log", "store::readable"];

/// The files below the hub (not `hub/`, `api/`, the crate root or this file) that import the
/// hub.
fn rooms_importing_the_hub(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let above = |m: &str| {
        m.is_empty()
            || m == "house"
            || ["hub", "api"]
                .iter()
                .any(|t| m == *t || m.starts_with(&format!("{t}::")))
    };
    edges
        .iter()
        .filter(|(m, to)| !above(m) && to.iter().any(|t| t == "hub" || t.starts_with("hub::")))
        .map(|(m, _)| m.clone())
        .collect()
}

#[test]
fn no_room_imports_the_hub_and_the_actions_stand_together() {
    let mut edges = imports();
    let found = rooms_importing_the_hub(&edges);
    assert_eq!(
        found, ACTIONS_IN_ROOMS,
        "a room imports the hub: move its `impl State` blocks to `hub/actions/` and keep the \
         records and their rules in the room"
    );
    // The check sees such an import.
    edges
        .entry("sched::queue".to_string())
        .or_default()
        .insert("hub".to_string());
    assert!(rooms_importing_the_hub(&edges).contains(&"sched::queue".to_string()));
}
