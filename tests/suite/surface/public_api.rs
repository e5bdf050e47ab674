//! The public API, listed in `docs/public-api.md` by public path: each module the crate
//! exports (`src/lib.rs`), each item under the path a user names it by, with its `pub` fields,
//! enum variants, trait items and `pub` methods, and the feature that gates it, if any.
//! Item reachability is the compiler's (`#![warn(unreachable_pub)]`, denied in CI); this list
//! reads the source with syn. The test fails when the list and the code differ, so a change to
//! the API shows in review; `UPDATE_PUBLIC_API=1 cargo test --test suite public_api` writes the
//! list again.

use std::collections::BTreeMap;
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

/// Whether `attrs` hold `#[doc(hidden)]`.
fn is_hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "hidden")
    })
}

/// The feature `attrs` gate on (`#[cfg(feature = "x")]`), as a suffix for the listing.
fn gate(attrs: &[syn::Attribute]) -> String {
    for a in attrs.iter().filter(|a| a.path().is_ident("cfg")) {
        if let Ok(syn::Meta::NameValue(nv)) = a.parse_args::<syn::Meta>()
            && nv.path.is_ident("feature")
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            return format!(" (feature `{}`)", s.value());
        }
    }
    String::new()
}

/// One source file, read and parsed.
struct Source {
    rel: String,
    lines: Vec<String>,
    file: syn::File,
}

impl Source {
    /// The declaration that starts at `span`'s line, whole: its lines joined (a signature
    /// that rustfmt broke over several lines, its `where` clause too), up to its opening brace
    /// or its end.
    fn line(&self, span: proc_macro2::Span) -> String {
        let mut out = String::new();
        let mut depth = 0usize;
        for l in self
            .lines
            .iter()
            .skip(span.start().line.saturating_sub(1))
            .take(40)
        {
            let t = l.trim();
            if !out.is_empty() && !out.ends_with('(') && !t.starts_with(')') {
                out.push(' ');
            }
            out.push_str(t);
            depth = (depth + t.matches('(').count()).saturating_sub(t.matches(')').count());
            let in_where = out.contains(" where") || out.ends_with("where");
            if depth == 0
                && (t.ends_with('{') || t.ends_with(';') || (t.ends_with(',') && !in_where))
            {
                break;
            }
        }
        let out = out.replace(", )", ")").replace(",)", ")");
        let out = out.split(" {").next().unwrap_or(&out);
        out.trim_end_matches(['{', ',', ';', '('])
            .trim()
            .to_string()
    }
}

/// A public item's definition: its declaration and what it holds.
#[derive(Default, Clone)]
struct Def {
    file: String,
    head: String,
    members: Vec<String>,
}

/// Every `pub` item of the crate by name (outside test modules and `src/protocol/`), with its
/// fields, variants and trait items; then the `pub` methods of inherent impls, by type.
fn definitions(sources: &[Source]) -> BTreeMap<String, Vec<Def>> {
    fn walk(src: &Source, items: &[syn::Item], defs: &mut BTreeMap<String, Vec<Def>>) {
        for item in items {
            let (name, vis, attrs, members) = match item {
                syn::Item::Struct(s) => {
                    let fields = s
                        .fields
                        .iter()
                        // The field's own line: its span would start at its doc comment.
                        .filter_map(|f| match &f.vis {
                            syn::Visibility::Public(p) => Some(src.line(p.span)),
                            _ => None,
                        })
                        .collect();
                    (s.ident.to_string(), &s.vis, &s.attrs, fields)
                }
                syn::Item::Enum(e) => {
                    let variants = e
                        .variants
                        .iter()
                        .map(|v| src.line(v.ident.span()))
                        .collect();
                    (e.ident.to_string(), &e.vis, &e.attrs, variants)
                }
                syn::Item::Trait(t) => {
                    let items = t
                        .items
                        .iter()
                        .filter_map(|i| match i {
                            syn::TraitItem::Fn(f) => Some(src.line(f.sig.fn_token.span)),
                            syn::TraitItem::Type(t) => Some(src.line(t.type_token.span)),
                            _ => None,
                        })
                        .collect();
                    (t.ident.to_string(), &t.vis, &t.attrs, items)
                }
                syn::Item::Fn(f) => (f.sig.ident.to_string(), &f.vis, &f.attrs, Vec::new()),
                syn::Item::Const(c) => (c.ident.to_string(), &c.vis, &c.attrs, Vec::new()),
                syn::Item::Static(s) => (s.ident.to_string(), &s.vis, &s.attrs, Vec::new()),
                syn::Item::Type(t) => (t.ident.to_string(), &t.vis, &t.attrs, Vec::new()),
                syn::Item::Mod(m) if !is_test(&m.attrs) => {
                    if let Some((_, items)) = &m.content {
                        walk(src, items, defs);
                    }
                    continue;
                }
                _ => continue,
            };
            let syn::Visibility::Public(p) = vis else {
                continue;
            };
            if is_test(attrs) {
                continue;
            }
            defs.entry(name).or_default().push(Def {
                file: src.rel.clone(),
                head: format!("{}{}", src.line(p.span), gate(attrs)),
                members,
            });
        }
    }
    fn methods(src: &Source, items: &[syn::Item], defs: &mut BTreeMap<String, Vec<Def>>) {
        for item in items {
            match item {
                syn::Item::Impl(i) if i.trait_.is_none() && !is_test(&i.attrs) => {
                    let syn::Type::Path(p) = &*i.self_ty else {
                        continue;
                    };
                    let Some(name) = p.path.segments.last().map(|s| s.ident.to_string()) else {
                        continue;
                    };
                    let Some(def) = defs.get_mut(&name).and_then(|d| {
                        d.iter_mut()
                            .find(|d| d.head.contains("struct ") || d.head.contains("enum "))
                    }) else {
                        continue;
                    };
                    for it in &i.items {
                        if let syn::ImplItem::Fn(f) = it
                            && let syn::Visibility::Public(p) = &f.vis
                            && !is_test(&f.attrs)
                        {
                            def.members
                                .push(format!("{}{}", src.line(p.span), gate(&f.attrs)));
                        }
                    }
                }
                syn::Item::Mod(m) if !is_test(&m.attrs) => {
                    if let Some((_, items)) = &m.content {
                        methods(src, items, defs);
                    }
                }
                _ => {}
            }
        }
    }
    let mut defs = BTreeMap::new();
    for src in sources {
        walk(src, &src.file.items, &mut defs);
    }
    for src in sources {
        methods(src, &src.file.items, &mut defs);
    }
    defs
}

/// The leaves of a `use` tree: (the path to the item, the name it is exported as).
fn leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push((prefix.clone(), n.ident.to_string())),
        syn::UseTree::Rename(r) => out.push((prefix.clone(), r.rename.to_string())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                leaves(t, prefix, out);
            }
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".into())),
    }
}

/// An exported item: the path it comes from, the name it is exported as, the feature gating it.
type Export = (Vec<String>, String, String);

/// The items a module exports: its `pub use`s (resolved to their definitions) and, for a
/// module in its own file, its own `pub` items; each with the feature that gates it.
fn exports(items: &[syn::Item], own_file: Option<&str>) -> Vec<Export> {
    let mut out = Vec::new();
    for item in items {
        match item {
            syn::Item::Use(u) if is_pub(&u.vis) => {
                let mut found = Vec::new();
                leaves(&u.tree, &mut Vec::new(), &mut found);
                let g = gate(&u.attrs);
                out.extend(found.into_iter().map(|(p, n)| (p, n, g.clone())));
            }
            syn::Item::Struct(syn::ItemStruct {
                vis, ident, attrs, ..
            })
            | syn::Item::Enum(syn::ItemEnum {
                vis, ident, attrs, ..
            })
            | syn::Item::Const(syn::ItemConst {
                vis, ident, attrs, ..
            })
            | syn::Item::Trait(syn::ItemTrait {
                vis, ident, attrs, ..
            }) if is_pub(vis) && own_file.is_some() => {
                let here = own_file.map(|f| vec![f.to_string()]).unwrap_or_default();
                out.push((here, ident.to_string(), gate(attrs)));
            }
            syn::Item::Fn(f) if is_pub(&f.vis) && own_file.is_some() => {
                let here = own_file.map(|f| vec![f.to_string()]).unwrap_or_default();
                out.push((here, f.sig.ident.to_string(), gate(&f.attrs)));
            }
            _ => {}
        }
    }
    out
}

/// `text` with each `crate::…::Name` written as a user writes it (`hatchet_runtime::…::Name`,
/// the module that exports `Name`), where `public` knows it.
fn user_paths(text: &str, public: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        out.push_str(&rest[..i]);
        let path_len = rest[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len() - i);
        let path = &rest[i..i + path_len];
        let name = path.rsplit("::").next().unwrap_or(path);
        match public.get(name) {
            Some(module) if name.starts_with(char::is_uppercase) => {
                out.push_str(&format!("{module}::{name}"));
            }
            _ => out.push_str(path),
        }
        rest = &rest[i + path_len..];
    }
    out.push_str(rest);
    out
}

fn listing() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    // The generated protocol (`src/protocol/`) is reachable only with the `protocol` feature,
    // hidden, for the development engine and the tests: not the public API.
    files.retain(|f| !f.starts_with(root.join("src/protocol")));
    let sources: Vec<Source> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read");
            Source {
                rel: f.strip_prefix(root).unwrap_or(f).display().to_string(),
                lines: text.lines().map(str::to_string).collect(),
                file: syn::parse_file(&text).expect("the crate's source parses"),
            }
        })
        .collect();
    let defs = definitions(&sources);
    let lib = sources
        .iter()
        .find(|s| s.rel == "src/lib.rs")
        .expect("src/lib.rs");

    // The modules a user names: the root, its inline `pub mod`s, and its `pub mod`s in files.
    let mut modules: Vec<(String, String, Vec<Export>)> = vec![(
        "hatchet_runtime".into(),
        String::new(),
        exports(&lib.file.items, None),
    )];
    for item in &lib.file.items {
        let syn::Item::Mod(m) = item else { continue };
        if !is_pub(&m.vis) || is_hidden(&m.attrs) {
            continue;
        }
        let path = format!("hatchet_runtime::{}", m.ident);
        let g = gate(&m.attrs);
        match &m.content {
            Some((_, items)) => modules.push((path, g, exports(items, None))),
            None => {
                let rel = format!("src/{}/mod.rs", m.ident);
                let alt = format!("src/{}.rs", m.ident);
                let src = sources
                    .iter()
                    .find(|s| s.rel == rel || s.rel == alt)
                    .expect("the module's file");
                modules.push((
                    path.clone(),
                    g.clone(),
                    exports(&src.file.items, Some(&src.rel)),
                ));
                for inner in &src.file.items {
                    if let syn::Item::Mod(im) = inner
                        && is_pub(&im.vis)
                        && let Some((_, items)) = &im.content
                    {
                        modules.push((
                            format!("{path}::{}", im.ident),
                            g.clone(),
                            exports(items, Some(&src.rel)),
                        ));
                    }
                }
            }
        }
    }

    // Where a user names each type: the first module that exports it (the root first).
    let mut public: BTreeMap<String, String> = BTreeMap::new();
    for (path, _, items) in &modules {
        for (_, name, _) in items {
            public.entry(name.clone()).or_insert_with(|| path.clone());
        }
    }
    let user_paths = |text: &str| user_paths(text, &public);

    let mut out = String::from(
        "# The public API of hatchet-runtime\n\nGenerated by `tests/suite/public_api.rs` (`UPDATE_PUBLIC_API=1 cargo test --test suite public_api`); the test fails when this list and the code differ, so every change to the public API shows in review. Each module a user names, each item under the path it is named by, with its `pub` fields, enum variants, trait items and `pub` methods, each signature whole, a type the code names by its `crate::` path written as a user writes it (`hatchet_runtime::…`); `(feature `x`)` marks what a feature gates. The generated protocol (`src/protocol/`, reachable only with the hidden `protocol` feature, for the development engine and this workspace's tests) and the workspace's test hooks are not part of it.\n",
    );
    for (path, g, items) in modules {
        out.push_str(&format!("\n## `{path}`{g}\n"));
        let mut items = items;
        items.sort_by(|a, b| a.1.cmp(&b.1));
        for (from, name, item_gate) in items {
            let Some(cands) = defs.get(&name) else {
                out.push_str(&format!(
                    "\n- `{name}` (re-exported from `{}`)\n",
                    from.join("::")
                ));
                continue;
            };
            // Two definitions of one name: the one in the file the path names.
            let dir = from
                .iter()
                .filter(|s| *s != "crate")
                .cloned()
                .collect::<Vec<_>>()
                .join("/");
            let def = cands
                .iter()
                .find(|d| from.len() == 1 && d.file == from[0])
                .or_else(|| {
                    cands
                        .iter()
                        .find(|d| d.file.starts_with(&format!("src/{dir}")))
                })
                .unwrap_or(&cands[0]);
            out.push_str(&format!(
                "\n- `{}`{item_gate} ({})\n",
                user_paths(&def.head),
                def.file
            ));
            for m in &def.members {
                out.push_str(&format!("  - `{}`\n", user_paths(m)));
            }
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

/// The root stays small: what a first workflow needs, the rest by module.
#[test]
fn the_root_exports_what_a_first_workflow_needs_and_the_rest_lives_in_modules() {
    let now = listing();
    let root = now
        .split("\n## `hatchet_runtime::")
        .next()
        .unwrap_or_default();
    let names = root.lines().filter(|l| l.starts_with("- `")).count();
    assert!(
        (10..=20).contains(&names),
        "{names} names at the root:\n{root}"
    );
}

/// No public signature names a generated protocol type (our own types stand at the API, with
/// conversions at the wire kept crate-private), nor the transport's, the HTTP client's or the
/// random generator's (a cause is our own type), so their major versions are not ours to follow.
#[test]
fn no_public_signature_names_a_protocol_or_transport_type() {
    let now = listing();
    let leaks: Vec<&str> = now
        .lines()
        .filter(|l| {
            [
                "proto::",
                "v1::",
                "hatchet_runtime::protocol",
                "prost::",
                "tonic::",
                "reqwest::",
                "rand::",
                "http::",
                "hyper::",
                "tower::",
                "axum::",
            ]
            .iter()
            .any(|p| l.contains(p))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "protocol or transport types in the public API: {leaks:#?}"
    );
}

/// The list prints each signature whole (rustfmt's broken lines joined) and names types as a user
/// writes them, never by the crate's internal `crate::` paths.
#[test]
fn a_listed_signature_is_whole_and_names_types_as_a_user_writes_them() {
    let list = listing();
    assert!(
        list.contains(
            "pub async fn spawn_child<I: Serialize>(&self, workflow: &str, input: &I) -> Result<RunHandle, Error>"
        ),
        "a signature rustfmt breaks over lines is printed whole"
    );
    assert!(
        list.contains("event: hatchet_runtime::durable::EventCondition"),
        "an internal path is printed as the public one"
    );
    let left: Vec<&str> = list
        .lines()
        .filter(|l| l.trim_start().starts_with("- `") && l.contains("crate::"))
        .collect();
    assert!(left.is_empty(), "internal paths left: {left:?}");
}
