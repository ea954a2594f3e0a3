//! The rooms of the server crate, as rules over its sources: the core
//! (`src/core`) never reaches the operations side, and reaches its own
//! modules by path only (`crate::core::...`), never through the crate
//! root, whose names include the operations side's. Inside the core, the
//! table side never names the wire side, and the wire side's imports run
//! one way: `accept` → `dispatch` → `v1`, `v2` → `connection`.
//!
//! Rust's privacy cannot forbid one sibling module from naming another,
//! so these rules are checked here, on the text of the sources: a `use`
//! that breaks one fails this test.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// The table side: the lock table and what it is made of.
const TABLE_SIDE: &[&str] = &[
    "table.rs",
    "slot.rs",
    "leases.rs",
    "grace.rs",
    "token.rs",
    "token_floor.rs",
    "clock.rs",
    "events.rs",
];

/// For each module of the wire side, the wire modules it must not name.
const WIRE_ORDER: &[(&str, &[&str])] = &[
    ("connection.rs", &["accept", "dispatch", "v1", "v2"]),
    ("v1.rs", &["accept", "dispatch", "v2"]),
    ("v2.rs", &["accept", "dispatch", "v1"]),
    ("dispatch.rs", &["accept"]),
];

fn core_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core")
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).expect("read src/core") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The code of a file without its unit tests and without comments (a doc
/// comment may name anything).
fn code_of(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("read source");
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text,
    };
    code.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each path that follows `crate::`, with every group expanded:
/// `crate::core::{a::B, c::{D, E}}` gives `core::a::B`, `core::c::D` and
/// `core::c::E`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let tree: String = rest
            .chars()
            .scan(0i32, |depth, ch| {
                let end = *depth == 0 && !(ch.is_alphanumeric() || "_:{ ".contains(ch));
                match ch {
                    '{' => *depth += 1,
                    '}' => *depth -= 1,
                    _ => {}
                }
                (!end && *depth >= 0).then_some(ch)
            })
            .collect();
        let tree = tree.split_whitespace().collect::<String>();
        expand("", &tree, &mut paths);
    }
    paths.retain(|path| !path.is_empty());
    paths
}

/// Expands one use tree (`a::b`, `a::{b, c::d}`) under `prefix`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    match tree.find('{') {
        None => out.push(format!("{prefix}{tree}")),
        Some(open) => {
            let head = format!("{prefix}{}", &tree[..open]);
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut depth = 0;
            let mut start = 0;
            for (at, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&head, &inner[start..at], out);
                        start = at + 1;
                    }
                    _ => {}
                }
            }
            expand(&head, &inner[start..], out);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(core_dir())
        .expect("under src/core")
        .display()
        .to_string()
}

#[test]
fn the_core_reaches_only_itself_and_by_path() {
    let mut broken = Vec::new();
    for path in sources(&core_dir()) {
        let code = code_of(&path);
        for named in crate_paths(&code) {
            if !named.starts_with("core::") {
                broken.push(format!("{}: crate::{named}", relative(&path)));
            }
        }
        if code.contains("super::super") {
            broken.push(format!("{}: super::super", relative(&path)));
        }
    }
    assert!(
        broken.is_empty(),
        "the core names something outside it, or through the crate root:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_table_side_never_names_the_wire_side() {
    let mut broken = Vec::new();
    for file in TABLE_SIDE {
        let path = core_dir().join(file);
        let code = code_of(&path);
        if code.contains("wire::") || code.contains("mod wire") {
            broken.push((*file).to_owned());
        }
    }
    assert!(
        broken.is_empty(),
        "the table side names the wire side: {broken:?}"
    );
}

#[test]
fn the_wire_side_imports_one_way() {
    let mut broken = Vec::new();
    for (file, forbidden) in WIRE_ORDER {
        let code = code_of(&core_dir().join("wire").join(file));
        for named in crate_paths(&code) {
            for module in *forbidden {
                let wire_path = format!("core::wire::{module}");
                if named == wire_path || named.starts_with(&format!("{wire_path}::")) {
                    broken.push(format!("{file} names {module}: crate::{named}"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the wire side imports against its order:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_rules_see_every_path_of_a_use() {
    let code = "use crate::{\n    Metrics,\n    core::{slot::Slot, wire::{connection::End, v2}},\n};\nfn f() { crate::ops::admin::x(); }";
    assert_eq!(
        crate_paths(code),
        [
            "Metrics",
            "core::slot::Slot",
            "core::wire::connection::End",
            "core::wire::v2",
            "ops::admin::x"
        ]
    );
}
