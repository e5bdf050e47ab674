//! The public API, listed in `docs/public-api.md`: every `pub` item of the runtime crate's source
//! (outside test modules), one line each, by file; `pub` fields and methods only of `pub` types
//! (inside a crate-private type they are not public). Item reachability is the compiler's:
//! `#![warn(unreachable_pub)]`, denied in CI. The test fails when the list and the code
//! differ, so a change to the API shows in review; `UPDATE_PUBLIC_API=1 cargo test --test suite
//! public_api` writes the list again.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Whether `vis` is plain `pub` (not `pub(crate)`, not private).
fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// Whether `attrs` hold `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// The names of the crate's `pub` types (structs, enums, traits, aliases), every file.
fn public_types(files: &[syn::File]) -> std::collections::BTreeSet<String> {
    fn walk(items: &[syn::Item], out: &mut std::collections::BTreeSet<String>) {
        for item in items {
            match item {
                syn::Item::Struct(s) if is_pub(&s.vis) => drop(out.insert(s.ident.to_string())),
                syn::Item::Enum(e) if is_pub(&e.vis) => drop(out.insert(e.ident.to_string())),
                syn::Item::Trait(t) if is_pub(&t.vis) => drop(out.insert(t.ident.to_string())),
                syn::Item::Type(t) if is_pub(&t.vis) => drop(out.insert(t.ident.to_string())),
                syn::Item::Mod(m) if !is_test(&m.attrs) => {
                    if let Some((_, items)) = &m.content {
                        walk(items, out);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for f in files {
        walk(&f.items, &mut out);
    }
    out
}

/// The public items of one file: each `pub` item, the `pub` fields of its `pub` structs, and
/// the `pub` methods of inherent impls of `pub` types (what is `pub` inside a crate-private
/// type is not public). Each as the first line of its declaration, trimmed, up to its opening
/// brace or the end of its signature line.
fn public_items(
    text: &str,
    file: &syn::File,
    types: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let line_of = |span: proc_macro2::Span| {
        let l = lines
            .get(span.start().line.saturating_sub(1))
            .map_or("", |l| l.trim());
        let l = l.split(" {").next().unwrap_or(l);
        l.trim_end_matches([',', ';', '(']).to_string()
    };
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut add = |vis: &syn::Visibility| {
        if let syn::Visibility::Public(p) = vis {
            found.push((p.span.start().line, line_of(p.span)));
        }
    };
    fn walk(
        items: &[syn::Item],
        types: &std::collections::BTreeSet<String>,
        add: &mut dyn FnMut(&syn::Visibility),
    ) {
        for item in items {
            match item {
                syn::Item::Fn(f) if !is_test(&f.attrs) => add(&f.vis),
                syn::Item::Const(c) => add(&c.vis),
                syn::Item::Static(s) => add(&s.vis),
                syn::Item::Type(t) => add(&t.vis),
                syn::Item::Trait(t) => add(&t.vis),
                syn::Item::Enum(e) => add(&e.vis),
                syn::Item::Struct(s) => {
                    add(&s.vis);
                    if is_pub(&s.vis) {
                        for f in &s.fields {
                            add(&f.vis);
                        }
                    }
                }
                syn::Item::Impl(i) if i.trait_.is_none() && !is_test(&i.attrs) => {
                    let name = match &*i.self_ty {
                        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                        _ => None,
                    };
                    if name.is_some_and(|n| types.contains(&n)) {
                        for it in &i.items {
                            if let syn::ImplItem::Fn(f) = it
                                && !is_test(&f.attrs)
                            {
                                add(&f.vis);
                            }
                        }
                    }
                }
                syn::Item::Mod(m) if !is_test(&m.attrs) => {
                    add(&m.vis);
                    if let Some((_, items)) = &m.content {
                        walk(items, types, add);
                    }
                }
                _ => {}
            }
        }
    }
    walk(&file.items, types, &mut add);
    found.sort();
    found.dedup();
    found.into_iter().map(|(_, l)| l).collect()
}

fn listing() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    // The generated protocol (`src/protocol/`) is reachable only with the `protocol` feature,
    // hidden, for the development engine and the tests: not the public API.
    files.retain(|f| !f.starts_with(root.join("src/protocol")));
    let mut out = String::from(
        "# The public API of hatchet-runtime\n\nGenerated by `tests/suite/public_api.rs` (`UPDATE_PUBLIC_API=1 cargo test --test suite public_api`); the test fails when this list and the code differ, so every change to the public API shows in review. Re-exports (`pub use`) are in `src/lib.rs`. The generated protocol (`src/protocol/`, reachable only with the `protocol` feature, hidden, for the development engine and this workspace's tests) is not part of it.\n",
    );
    let texts: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .collect();
    let parsed: Vec<syn::File> = texts
        .iter()
        .map(|t| syn::parse_file(t).expect("the crate's source parses"))
        .collect();
    let types = public_types(&parsed);
    for ((f, text), file) in files.iter().zip(&texts).zip(&parsed) {
        let items = public_items(text, file, &types);
        if items.is_empty() {
            continue;
        }
        let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
        out.push_str(&format!("\n## `{rel}`\n\n"));
        for i in items {
            out.push_str(&format!("- `{i}`\n"));
        }
    }
    out
}

#[test]
fn the_public_api_list_matches_the_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/public-api.md");
    let now = listing();
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&path, &now).expect("write docs/public-api.md");
        return;
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    if kept != now {
        let old: std::collections::BTreeSet<&str> = kept.lines().collect();
        let new: std::collections::BTreeSet<&str> = now.lines().collect();
        let added: Vec<_> = new.difference(&old).collect();
        let removed: Vec<_> = old.difference(&new).collect();
        panic!(
            "the public API changed; review it, then run UPDATE_PUBLIC_API=1 cargo test --test suite public_api\nadded: {added:#?}\nremoved: {removed:#?}"
        );
    }
}

/// Issue 25's promise: no public signature names a generated protocol type (our own types
/// stand at the API, with conversions at the wire kept crate-private).
#[test]
fn no_public_signature_names_a_protocol_type() {
    let now = listing();
    let leaks: Vec<&str> = now
        .lines()
        .filter(|l| {
            ["proto::", "v1::", "hatchet_runtime::protocol", "prost::"]
                .iter()
                .any(|p| l.contains(p))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "protocol types in the public API: {leaks:#?}"
    );
}
